"""Write the bring-your-own example's assets, offline: a tiny policy, a reward model and a prompt dataset.

    python examples/bring_your_own/make_assets.py [OUTDIR]      # OUTDIR defaults to examples/bring_your_own/assets

It writes, under OUTDIR:

* ``policy/``: a randomly initialised 2-layer Llama (``LlamaForCausalLM``) with a SentencePiece-style Metaspace
  tokenizer that, like Llama's, has no pad token and a chat template (``<s>[INST] ... [/INST]``);
* ``reward_model/``: a one-label GPT-2 sequence classifier (``GPT2ForSequenceClassification``) with a different,
  byte-level BPE tokenizer, so rewards are scored on re-tokenized text;
* ``prompts/``: ``train.jsonl`` and ``test.jsonl`` in TRL's conversational format with an extra ``letter``
  column, which ``datasets.load_dataset("OUTDIR/prompts")`` reads as two splits and ``rewards.letter_reward``
  receives as a keyword argument.

Everything is built from scratch (tokenizers trained on a built-in corpus, random weights), so nothing is
downloaded. Each model directory is written with ``save_pretrained`` and loads with ``from_pretrained``, exactly
like a model of your own.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
# Run as a plain script (python examples/bring_your_own/make_assets.py), the repo root is not on sys.path, and
# the builders live in the repo's tools package.
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tools.tiny_data import write_jsonl_splits  # noqa: E402
from tools.tiny_models import describe, write_llama, write_reward_model  # noqa: E402

DEFAULT_OUTDIR = Path(__file__).resolve().parent / "assets"


def make_assets(outdir: Path, seed: int = 0) -> dict[str, Path]:
    """Write the policy, the reward model and the prompts under ``outdir``; return their paths by name."""
    outdir = Path(outdir)
    return {
        "policy": write_llama(outdir / "policy", seed=seed),
        "reward_model": write_reward_model(
            outdir / "reward_model", architecture="gpt2", tokenizer="byte_level", seed=seed + 1
        ),
        "prompts": write_jsonl_splits(outdir / "prompts", "conversational", n_train=256, n_test=32, seed=seed),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python examples/bring_your_own/make_assets.py", description=__doc__.splitlines()[0]
    )
    parser.add_argument("outdir", type=Path, nargs="?", default=DEFAULT_OUTDIR, help=f"default {DEFAULT_OUTDIR}")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    from transformers.utils import logging as hf_logging

    # save_pretrained draws a progress bar per file; the summary below says what was written.
    hf_logging.disable_progress_bar()
    written = make_assets(args.outdir, args.seed)
    print(f"policy:       {describe(written['policy'])}")
    print(f"reward model: {describe(written['reward_model'])}")
    splits = sorted(path.name for path in written["prompts"].glob("*.jsonl"))
    first_row = (written["prompts"] / "train.jsonl").read_text(encoding="utf-8").splitlines()[0]
    print(f"prompts:      {written['prompts']}: {', '.join(splits)}; first row {first_row}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
