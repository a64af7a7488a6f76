"""Prompts: the built-in task's, or a dataset's ``prompt`` column in TRL's standard or conversational format.

A dataset is whatever ``dataset_name`` names: a hub dataset, a directory that ``datasets.load_dataset`` reads
or ``save_to_disk`` wrote, or one file. Every other column travels with its row to the reward functions.
Conversations reach the policy through its tokenizer's chat template, with the generation prompt added.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerBase

from ppo_core.config.ppo_config import ConfigError, PPOConfig
from ppo_core.errors import first_line

PROMPT_COLUMN = "prompt"
# File suffixes and the datasets builder that reads each; a .txt file holds one prompt per line.
FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet", ".txt": "text"}

Message = dict[str, str]
Prompt = str | list[Message]


@dataclass(frozen=True)
class PromptSet:
    """Prompts as the dataset holds them, as the policy reads them, and the dataset's other columns."""

    prompts: list[Prompt]
    texts: list[str]  # the text itself, or the conversation rendered by the chat template
    columns: dict[str, list[Any]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def conversational(self) -> bool:
        return bool(self.prompts) and isinstance(self.prompts[0], list)

    def select(self, rows: Sequence[int]) -> PromptSet:
        """The given rows, in that order."""
        return PromptSet(
            prompts=[self.prompts[i] for i in rows],
            texts=[self.texts[i] for i in rows],
            columns={name: [values[i] for i in rows] for name, values in self.columns.items()},
        )


def text_prompts(texts: Sequence[str]) -> PromptSet:
    """Plain text prompts with no other columns (the built-in task's)."""
    return PromptSet(prompts=list(texts), texts=list(texts))


def prompt_sets(config: PPOConfig, task_prompts: tuple[Sequence[str], Sequence[str]] | None,
                tokenizer: PreTrainedTokenizerBase) -> tuple[PromptSet, PromptSet]:
    """The training and evaluation prompts: a built-in task's ``task_prompts`` (training, held-out) where the config
    names no dataset, else the dataset's (:func:`load_prompt_sets`)."""
    if task_prompts is not None:
        train, evaluation = task_prompts
        return text_prompts(train), text_prompts(evaluation[: config.num_eval_prompts])
    return load_prompt_sets(config, tokenizer)


def load_prompt_sets(config: PPOConfig, tokenizer: PreTrainedTokenizerBase) -> tuple[PromptSet, PromptSet]:
    """The training prompts and the evaluation prompts (the test split's, else the first training ones)."""
    assert config.dataset_name is not None  # the caller falls back to the task's prompts otherwise
    splits = _load_splits(config)
    if config.dataset_train_split not in splits:
        raise ConfigError(f"dataset_train_split: {config.dataset_name!r} has no split {config.dataset_train_split!r} "
                          f"(it has {', '.join(splits) or 'none'})")
    train = _prompt_set(splits[config.dataset_train_split], config, tokenizer)
    if len(train) == 0:
        raise ConfigError(f"dataset_name: the {config.dataset_train_split!r} split of {config.dataset_name!r} is empty")
    evaluation = train
    if config.dataset_test_split in splits and config.dataset_test_split != config.dataset_train_split:
        evaluation = _prompt_set(splits[config.dataset_test_split], config, tokenizer) or train
    return train, evaluation.select(range(min(config.num_eval_prompts, len(evaluation))))


def _load_splits(config: PPOConfig) -> dict[str, Any]:
    """Every split of the dataset, by name; one-line ConfigErrors for a dataset that cannot be read."""
    import datasets

    name = config.dataset_name
    assert name is not None
    path = Path(name).expanduser()
    try:
        if path.is_file():
            builder = FILE_BUILDERS.get(path.suffix.lower())
            if builder is None:
                raise ConfigError(f"dataset_name: cannot read {name!r}: expected one of "
                                  f"{', '.join(FILE_BUILDERS)} files, or a directory")
            loaded = datasets.load_dataset(builder, data_files={config.dataset_train_split: str(path)})
            if builder == "text":
                blank_lines_dropped = loaded.filter(lambda row: bool(row["text"].strip()))
                loaded = blank_lines_dropped.rename_column("text", PROMPT_COLUMN)
        elif path.is_dir() and ((path / "dataset_dict.json").is_file() or (path / "state.json").is_file()):
            loaded = datasets.load_from_disk(str(path))  # a save_to_disk directory
        elif path.is_dir():
            loaded = datasets.load_dataset(str(path), name=config.dataset_config)
        elif _looks_like_a_path(name):
            raise ConfigError(f"dataset_name: no such file or directory {name!r}")
        else:
            loaded = datasets.load_dataset(name, name=config.dataset_config)
    except ConfigError:
        raise
    except Exception as error:  # datasets raises many kinds (FileNotFoundError, DatasetNotFoundError, ValueError)
        raise ConfigError(f"dataset_name: cannot load {name!r} ({first_line(error)})") from None
    if isinstance(loaded, datasets.Dataset):
        return {config.dataset_train_split: loaded}
    return dict(loaded)


def _prompt_set(dataset: Any, config: PPOConfig, tokenizer: PreTrainedTokenizerBase) -> PromptSet:
    if PROMPT_COLUMN not in dataset.column_names:
        raise ConfigError(f"dataset_name: {config.dataset_name!r} has no {PROMPT_COLUMN!r} column "
                          f"(its columns: {', '.join(dataset.column_names)})")
    prompts: list[Prompt] = list(dataset[PROMPT_COLUMN])
    columns = {name: list(dataset[name]) for name in dataset.column_names if name != PROMPT_COLUMN}
    if prompts and isinstance(prompts[0], list):
        conversations = [prompt for prompt in prompts if isinstance(prompt, list)]
        if len(conversations) != len(prompts):
            raise ConfigError(f"dataset_name: the {PROMPT_COLUMN!r} column mixes text and conversations")
        return PromptSet(prompts, render_conversations(conversations, tokenizer), columns)
    if not all(isinstance(prompt, str) for prompt in prompts):
        raise ConfigError(f"dataset_name: the {PROMPT_COLUMN!r} column must hold text or lists of "
                          f"{{role, content}} messages")
    return PromptSet(prompts, [str(prompt) for prompt in prompts], columns)


def render_conversations(conversations: Sequence[list[Message]], tokenizer: PreTrainedTokenizerBase) -> list[str]:
    """Each conversation as the policy's chat template writes it, ending where the assistant's reply begins."""
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError("dataset_name: the prompts are conversations but the policy's tokenizer has no chat "
                          "template; use a chat model's tokenizer or plain-text prompts")
    return [
        str(tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True))
        for conversation in conversations
    ]


def _looks_like_a_path(name: str) -> bool:
    """A hub name is ``dataset`` or ``owner/dataset``; anything else that does not exist is a missing path."""
    return name.startswith(("/", ".", "~")) or name.count("/") > 1 or Path(name).suffix.lower() in FILE_BUILDERS
