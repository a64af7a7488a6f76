"""A text task's data, rebuilt from its parameters on every load: the prompt split and the gold scorer.

Both are cheap (about 1.4 s for the corpus, the split and the scorer's counts, on an AMD EPYC) and torch-free, so a
built task keeps only its models on disk and every process derives the same prompts and gold from the installed
corpus. A process derives them once per parameters: a run loads its task twice (the precision check reads the
policy's path before the run's parts load), and paid the 1.4 s twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ppo_core.tasks.fortunes.corpus import load_corpus
from ppo_core.tasks.fortunes.gold import TextGoldScorer, build_gold_scorer
from ppo_core.tasks.fortunes.params import TextTaskParams
from ppo_core.tasks.fortunes.prompts import TextSplit, split_examples


@dataclass(frozen=True)
class TextTaskData:
    """The split a text task trains and evaluates on, and its gold scorer (built from the training texts only)."""

    split: TextSplit
    gold: TextGoldScorer

    @property
    def train_texts(self) -> list[str]:
        """The training texts, whole: the tokenizer's and the gold scorer's corpus, and the SFT data."""
        return [example.text for example in self.split.train]


@lru_cache(maxsize=4)
def text_task_data(params: TextTaskParams) -> TextTaskData:
    """The task's split (``num_heldout`` prompts held out with ``seed``) and the gold scorer (of its version) of its
    training texts."""
    split = split_examples(load_corpus().texts, params.num_heldout, params.seed)
    return TextTaskData(split=split, gold=build_gold_scorer([example.text for example in split.train],
                                                            version=params.gold_version))
