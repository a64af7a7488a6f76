"""Tiny prompt datasets in TRL's formats, and writers for every file layout ``datasets.load_dataset`` reads.

Each row asks for text containing one letter and carries that letter in an extra ``letter`` column, which a
reward function receives as a keyword argument (TRL passes dataset columns other than ``prompt`` through):

* standard format: ``{"prompt": "write words with the letter e:", "letter": "e"}``;
* conversational format: ``{"prompt": [{"role": "user", "content": "Write words with the letter e."}],
  "letter": "e"}`` (a list of chat messages, rendered with the policy's chat template).

The writers lay the same rows out as a ``DatasetDict.save_to_disk`` directory (``train``/``test`` splits), one
``.jsonl``, ``.json`` (a JSON array), ``.csv`` (standard format only: CSV cannot hold lists) or ``.parquet`` file,
or a directory of ``train.jsonl``/``test.jsonl`` that ``load_dataset(directory)`` reads as two splits.

``python -m tools.tiny_data OUTDIR`` writes all of them, in both formats, under OUTDIR.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from datasets import Dataset, DatasetDict

PromptFormat = Literal["standard", "conversational"]

# Letters common in English text, so a random tiny policy already emits them now and then and a reward on them
# has a signal to climb from.
LETTERS = "aeinorst"

# Standard-format prompts: plain text ending where the completion starts.
STANDARD_TEMPLATES: tuple[str, ...] = (
    "write words with the letter {letter}:",
    "use the letter {letter} a lot:",
    "say many words that contain {letter}:",
    "think of words with {letter} in them:",
)
# Conversational prompts: a user message; the chat template adds the turn markers.
CONVERSATIONAL_TEMPLATES: tuple[str, ...] = (
    "Write words with the letter {letter}.",
    "Use the letter {letter} a lot.",
    "Say many words that contain {letter}.",
    "Think of words with {letter} in them.",
)


def _rows(n: int, seed: int, templates: Sequence[str]) -> list[tuple[str, str]]:
    # A private Random so the rows depend on the seed alone, not on the global random state.
    rng = random.Random(seed)
    return [(rng.choice(templates).format(letter=letter), letter) for letter in (rng.choice(LETTERS) for _ in range(n))]


def standard_prompts(n: int = 64, seed: int = 0) -> Dataset:
    """``n`` rows ``{"prompt": str, "letter": str}`` in TRL's standard (plain text) prompt format."""
    rows = _rows(n, seed, STANDARD_TEMPLATES)
    return Dataset.from_dict({"prompt": [prompt for prompt, _ in rows], "letter": [letter for _, letter in rows]})


def conversational_prompts(n: int = 64, seed: int = 0) -> Dataset:
    """``n`` rows ``{"prompt": [{"role": "user", "content": str}], "letter": str}`` in TRL's conversational format."""
    rows = _rows(n, seed, CONVERSATIONAL_TEMPLATES)
    return Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": content}] for content, _ in rows],
            "letter": [letter for _, letter in rows],
        }
    )


def prompts(prompt_format: PromptFormat = "standard", n: int = 64, seed: int = 0) -> Dataset:
    """``standard_prompts`` or ``conversational_prompts`` by name."""
    if prompt_format == "standard":
        return standard_prompts(n, seed)
    if prompt_format == "conversational":
        return conversational_prompts(n, seed)
    raise ValueError(f"unknown prompt format {prompt_format!r}; known: standard, conversational")


def prompt_splits(
    prompt_format: PromptFormat = "standard", n_train: int = 64, n_test: int = 16, seed: int = 0
) -> DatasetDict:
    """A ``train`` and a ``test`` split; the test rows come from another seed, so they are drawn independently."""
    return DatasetDict(
        {"train": prompts(prompt_format, n_train, seed), "test": prompts(prompt_format, n_test, seed + 1_000)}
    )


# ------------------------------------------------------------------------------------------------------ writers


def write_save_to_disk(
    directory: Path, prompt_format: PromptFormat = "standard", n_train: int = 64, n_test: int = 16, seed: int = 0
) -> Path:
    """A ``DatasetDict.save_to_disk`` directory with ``train`` and ``test``; read it with ``load_from_disk``."""
    directory = Path(directory)
    prompt_splits(prompt_format, n_train, n_test, seed).save_to_disk(str(directory))
    return directory


def _records(dataset: Dataset) -> list[dict[str, Any]]:
    return [dict(row) for row in dataset]


def write_jsonl(path: Path, prompt_format: PromptFormat = "standard", n: int = 64, seed: int = 0) -> Path:
    """One JSON object per line; ``load_dataset("json", data_files=path)`` reads it as a ``train`` split."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_lines(path, _records(prompts(prompt_format, n, seed)))
    return path


def write_json(path: Path, prompt_format: PromptFormat = "standard", n: int = 64, seed: int = 0) -> Path:
    """A single JSON array of row objects (not JSON lines), which the ``json`` builder reads too."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_records(prompts(prompt_format, n, seed)), indent=1) + "\n", encoding="utf-8")
    return path


def write_csv(path: Path, prompt_format: PromptFormat = "standard", n: int = 64, seed: int = 0) -> Path:
    """A CSV file with ``prompt`` and ``letter`` columns; standard format only, since a cell cannot hold messages."""
    if prompt_format != "standard":
        raise ValueError("CSV holds only the standard prompt format: a conversational prompt is a list of messages")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    prompts(prompt_format, n, seed).to_csv(str(path), index=False)
    return path


def write_parquet(path: Path, prompt_format: PromptFormat = "standard", n: int = 64, seed: int = 0) -> Path:
    """A Parquet file; it keeps the conversational prompt's list-of-messages structure."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    prompts(prompt_format, n, seed).to_parquet(str(path))
    return path


def write_jsonl_splits(
    directory: Path, prompt_format: PromptFormat = "standard", n_train: int = 64, n_test: int = 16, seed: int = 0
) -> Path:
    """A directory holding ``train.jsonl`` and ``test.jsonl``: ``load_dataset(directory)`` reads two splits."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for split, dataset in prompt_splits(prompt_format, n_train, n_test, seed).items():
        _write_lines(directory / f"{split}.jsonl", _records(dataset))
    return directory


def _write_lines(path: Path, records: list[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")


def write_all(outdir: Path, prompt_format: PromptFormat = "standard", seed: int = 0) -> dict[str, Path]:
    """Every layout of one prompt format under ``outdir``, by layout name (CSV only for the standard format)."""
    outdir = Path(outdir)
    written = {
        "save_to_disk": write_save_to_disk(outdir / "save_to_disk", prompt_format, seed=seed),
        "jsonl": write_jsonl(outdir / "prompts.jsonl", prompt_format, seed=seed),
        "json": write_json(outdir / "prompts.json", prompt_format, seed=seed),
        "parquet": write_parquet(outdir / "prompts.parquet", prompt_format, seed=seed),
        "jsonl_splits": write_jsonl_splits(outdir / "jsonl_splits", prompt_format, seed=seed),
    }
    if prompt_format == "standard":
        written["csv"] = write_csv(outdir / "prompts.csv", prompt_format, seed=seed)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.tiny_data", description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path, help="directory to write standard/ and conversational/ under")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    prompt_format: PromptFormat
    for prompt_format in ("standard", "conversational"):
        for layout, path in write_all(args.outdir / prompt_format, prompt_format, args.seed).items():
            print(f"{prompt_format:>14} {layout:<12} {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
