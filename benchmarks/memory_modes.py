"""Peak memory of one PPO run on a ~58M-parameter Llama, full fine-tuning against LoRA, bf16 frozen weights,
gradient checkpointing and a critic-free estimator (no value network): each mode in its own fresh process, measured
by the run's own ``memory/peak_gib``.

    python -m benchmarks.memory_modes             # CPU: about 12 minutes on 2 cores
    python -m benchmarks.memory_modes --modes "full fp32" "full fp32, GRPO (no value network)"
    python -m benchmarks.memory_modes --device cuda --size pythia-160m
    python -m benchmarks.memory_modes --quick --out /tmp/memory_modes.json   # a smoke run: a tiny Llama, 1 update

Each mode trains ``--updates`` PPO updates from the CLI; the peak is the highest per-update ``memory/peak_gib``
(peak resident set on the CPU, CUDA peak allocated on a GPU), next to ``ppo-tune train --estimate``'s prediction.
The process's RSS after its imports is reported too: on the CPU the peak includes it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
import yaml
from transformers import (
    GPTNeoXForCausalLM,
    GPTNeoXForSequenceClassification,
    LlamaForCausalLM,
    LlamaForSequenceClassification,
    PreTrainedModel,
)

from benchmarks.common.machine import machine_facts
from ppo_core.config.io import load_config
from ppo_core.memory.estimate import estimate_run
from tools.provenance import command_line
from tools.quick_mode import add_quick_argument, results_path
from tools.tiny_models import Architecture, TinySize, _save, metaspace_tokenizer, tiny_config

MODES: dict[str, dict[str, Any]] = {
    "full fp32": {},
    "full, bf16 frozen": {"dtype": "bfloat16"},
    "LoRA": {"use_peft": True},
    "LoRA, bf16 frozen": {"use_peft": True, "dtype": "bfloat16"},
    "LoRA, bf16 frozen, checkpointing": {"use_peft": True, "dtype": "bfloat16", "gradient_checkpointing": True},
    # The same rollout of 16 episodes as 4 prompts x 4 responses: no value network is built, loaded or stepped.
    "full fp32, GRPO (no value network)": {"advantage_estimator": "grpo"},
    "LoRA, bf16 frozen, GRPO (no value network)": {"use_peft": True, "dtype": "bfloat16",
                                                   "advantage_estimator": "grpo"},
}
# name: (architecture, hidden, layers, heads, intermediate, vocabulary)
SIZES: dict[str, tuple[Architecture, int, int, int, int, int]] = {
    "llama-58m": ("llama", 512, 8, 8, 1376, 32000),
    "pythia-160m": ("gpt_neox", 768, 12, 12, 3072, 50304),
    "llama-tiny": ("llama", 64, 2, 4, 128, 1000),  # --quick
}
RESPONSE_LENGTH = 64
# --quick: every mode on a tiny Llama, one update of 8-token responses.
QUICK_SIZE, QUICK_UPDATES, QUICK_RESPONSE_LENGTH = "llama-tiny", 1, 8


def write_models(root: Path, size: str) -> dict[str, Path]:
    """A policy and a same-shaped reward model (sharing the tokenizer, so the value network sits on the RM's trunk)."""
    architecture, hidden, layers, heads, intermediate, vocabulary = SIZES[size]
    tokenizer = metaspace_tokenizer()
    shape = TinySize(hidden_size=hidden, num_layers=layers, num_heads=heads, max_position_embeddings=2048)
    classes: tuple[type[PreTrainedModel], type[PreTrainedModel]]
    classes = {"llama": (LlamaForCausalLM, LlamaForSequenceClassification),
               "gpt_neox": (GPTNeoXForCausalLM, GPTNeoXForSequenceClassification)}[architecture]
    torch.manual_seed(0)
    config = tiny_config(architecture, tokenizer, shape, intermediate_size=intermediate, vocab_size=vocabulary,
                         tie_word_embeddings=False)
    policy = _save(root / "policy", classes[0](config), tokenizer)
    reward = _save(root / "reward", classes[1](tiny_config(architecture, tokenizer, shape,
                                                           intermediate_size=intermediate, vocab_size=vocabulary,
                                                           num_labels=1)), tokenizer)
    prompts = root / "prompts.txt"
    prompts.write_text("".join(" ".join(["write words with the letter e:"] * (1 + i % 6)) + "\n" for i in range(256)))
    return {"policy": policy, "reward": reward, "prompts": prompts}


def run_mode(root: Path, paths: dict[str, Path], name: str, values: dict[str, Any], device: str,
             updates: int, response_length: int = RESPONSE_LENGTH) -> dict[str, Any]:
    config = root / f"{len(list(root.glob('*.yaml')))}.yaml"
    batch = 16
    config.write_text(yaml.safe_dump({
        "task": None, "sft_model_path": str(paths["policy"]), "reward_model_path": str(paths["reward"]),
        "dataset_name": str(paths["prompts"]), "response_length": response_length, "per_device_train_batch_size": 8,
        "gradient_accumulation_steps": batch // 8, "local_rollout_forward_batch_size": batch, "num_ppo_epochs": 1,
        "total_episodes": batch * updates, "num_sample_generations": 0, "use_cpu": device == "cpu",
        "bf16": None, **values,
    }))
    out = root / config.stem
    completed = subprocess.run([sys.executable, "-m", "ppo_tune", "train", str(config), "--output", str(out),
                                "--quiet"], capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise RuntimeError(f"{name}: {completed.stderr.strip().splitlines()[-1]}")
    summary = json.loads(completed.stdout)
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    # The prediction reads the same file, as `ppo-tune train CONFIG --estimate` does; it loads no weights.
    predicted = estimate_run(load_config(str(config), [])).to_dict()
    return {
        "mode": name,
        "trainable_parameters": sum(summary["trainable_parameters"].values()),  # no "value" without a critic
        "peak_gib": max(m["memory/peak_gib"] for m in metrics),
        "estimated_peak_gib": predicted["peak_bytes"] / 2**30,
        "seconds_per_update": summary["seconds_per_update"],
    }


def baseline_rss_gib() -> float:
    """RSS of a fresh process that has imported what a run imports, before it loads any model."""
    code = ("import ppo_core.run.trainer, peft; from ppo_core.memory.peak import peak_memory_gib; import torch;"
            "print(peak_memory_gib(torch.device('cpu')))")
    return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.memory_modes")
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--size", default=None, choices=tuple(SIZES), help="Default llama-58m (--quick llama-tiny).")
    parser.add_argument("--updates", type=int, default=None, help="Default 2 (--quick 1).")
    parser.add_argument("--out", default=None, help="Write the rows as JSON here too (--quick: always, by default "
                                                    "into a temporary directory).")
    parser.add_argument("--modes", nargs="+", choices=tuple(MODES), default=list(MODES),
                        help="Run only these modes (the first is the 'vs' reference).")
    add_quick_argument(parser)
    args = parser.parse_args(argv)
    size: str = args.size or (QUICK_SIZE if args.quick else "llama-58m")
    updates: int = args.updates or (QUICK_UPDATES if args.quick else 2)
    response_length = QUICK_RESPONSE_LENGTH if args.quick else RESPONSE_LENGTH
    out = results_path(args.out, Path(f"memory_modes_{args.device}.json"), args.quick) \
        if args.out or args.quick else None
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        paths = write_models(root, size)
        rows = [run_mode(root, paths, name, MODES[name], args.device, updates, response_length)
                for name in args.modes]
    full = rows[0]["peak_gib"]
    for row in rows:
        row["peak_vs_first_mode"] = row["peak_gib"] / full
    baseline = baseline_rss_gib() if args.device == "cpu" else 0.0
    print(f"{size} on {args.device}; process RSS after imports {baseline:.2f} GiB")
    print(f"{'mode':<36} {'trainable':>12} {'peak GiB':>9} {'vs full':>8} {'estimate':>9} {'s/update':>9}")
    for row in rows:
        print(f"{row['mode']:<36} {row['trainable_parameters']:>12,} {row['peak_gib']:>9.2f} "
              f"{row['peak_vs_first_mode']:>8.2f} {row['estimated_peak_gib']:>9.2f} {row['seconds_per_update']:>9.2f}")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"command": command_line("benchmarks.memory_modes", argv),
                                   "machine": machine_facts(args.device), "size": size,
                                   "device": args.device, "updates": updates,
                                   "response_length": response_length, "quick": args.quick,
                                   "baseline_rss_gib": baseline, "rows": rows}, indent=2))
        print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
