"""One evaluation prompt's generations as a grid: trials as columns, sampling points as rows, each text's words
that differ from the first column's marked. Pure pandas and HTML strings, no Streamlit.

Rows are keyed by update or by episode. Trials with different rollout batch sizes sample at different updates
but, sharing ``total_episodes`` and ``num_sample_generations``, at the same episodes: keyed by episode their k-th
samples share a row. :func:`row_key` picks whichever key gives the fewer rows.
"""

from __future__ import annotations

import difflib
import html
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from dashboard.frames import MISSING

ROW_KEYS = ("update", "episode")
_TOKENS = re.compile(r"\s+|\S+")
MARK_STYLE = "background-color: rgba(255, 193, 7, 0.45); border-radius: 2px"
CELL_STYLE = "vertical-align: top; padding: 6px 8px; border: 1px solid rgba(128, 128, 128, 0.35)"
TEXT_STYLE = "white-space: pre-wrap; font-family: monospace; font-size: 0.85em; margin-bottom: 4px"
SCORE_STYLE = "font-size: 0.8em; opacity: 0.75"


def prompt_rows(samples: pd.DataFrame, prompt_index: int, trials: Sequence[int]) -> pd.DataFrame:
    """The samples of one prompt for the given trials."""
    return samples[(samples["prompt_index"] == prompt_index) & samples["trial_number"].isin(list(trials))]


def row_key(rows: pd.DataFrame) -> str:
    """"update" or "episode": the key with fewer distinct values over ``rows`` (update on a tie)."""
    if rows.empty:
        return ROW_KEYS[0]
    return min(ROW_KEYS, key=lambda key: (rows[key].nunique(), ROW_KEYS.index(key)))


def sample_grid(rows: pd.DataFrame, trials: Sequence[int], key: str) -> pd.DataFrame:
    """A frame indexed by the sorted values of ``key``, one column per trial (in the order given), each cell the
    sample's record (response, score, gold_score, update, episode) or None where the trial has no sample there.

    Every recorded sampling point of the trials is a row; nothing is dropped or overwritten. Should a trial have
    two samples at one key (a re-run trial writes again), the later row id wins, as the reader orders them.
    """
    if key not in ROW_KEYS:
        raise ValueError(f"unknown row key {key!r}; expected one of {', '.join(ROW_KEYS)}")
    index = sorted(int(v) for v in rows[key].unique())
    grid = pd.DataFrame(index=pd.Index(index, name=key), columns=list(trials), dtype=object)
    for record in rows.to_dict("records"):
        grid.at[int(record[key]), int(record["trial_number"])] = {
            name: record[name] for name in ("response", "score", "gold_score", "update", "episode")
        }
    return grid


def word_diff(reference: str, text: str) -> list[tuple[str, bool]]:
    """``text`` cut into runs of words and whitespace, each flagged True when it is not in a matching block of
    ``reference`` (difflib's longest-matching-blocks alignment over the same tokens). Whitespace is never flagged;
    the runs joined give ``text`` back exactly."""
    ours, theirs = _TOKENS.findall(text), _TOKENS.findall(reference)
    matched = [False] * len(ours)
    for block in difflib.SequenceMatcher(a=theirs, b=ours, autojunk=False).get_matching_blocks():
        matched[block.b:block.b + block.size] = [True] * block.size
    return [(token, not (same or token.isspace())) for token, same in zip(ours, matched, strict=True)]


def _marked(segments: list[tuple[str, bool]]) -> str:
    return "".join(f'<mark style="{MARK_STYLE}">{html.escape(token)}</mark>' if changed else html.escape(token)
                   for token, changed in segments)


def _score(value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return MISSING
    return f"{float(value):.3f}"


def _cell(sample: Mapping[str, Any] | None, reference: Mapping[str, Any] | None, key: str, first: bool) -> str:
    if sample is None:
        return f'<td style="{CELL_STYLE}; opacity: 0.5">no sample here</td>'
    text = str(sample["response"] or "")
    if first or reference is None:
        body = html.escape(text)
    else:
        body = _marked(word_diff(str(reference["response"] or ""), text))
    other = "episode" if key == "update" else "update"
    scores = (f"proxy {_score(sample['score'])} · gold {_score(sample['gold_score'])} · "
              f"{other} {int(sample[other])}")
    return (f'<td style="{CELL_STYLE}"><div style="{TEXT_STYLE}">{body or "(empty response)"}</div>'
            f'<div style="{SCORE_STYLE}">{scores}</div></td>')


def grid_html(grid: pd.DataFrame, labels: Mapping[int, str]) -> str:
    """The grid as one HTML table: a header of trial labels, a row per sampling point. Text is escaped; the words
    that differ from the first column's text in the same row are wrapped in <mark>."""
    key = str(grid.index.name)
    head = "".join(f'<th style="{CELL_STYLE}">{html.escape(labels.get(int(n), f"#{n}"))}</th>' for n in grid.columns)
    body = []
    for at, row in grid.iterrows():
        cells = list(row)
        reference = cells[0] if cells else None
        tds = "".join(_cell(sample if isinstance(sample, dict) else None,
                            reference if isinstance(reference, dict) else None, key, i == 0)
                      for i, sample in enumerate(cells))
        body.append(f'<tr><th style="{CELL_STYLE}">{key} {int(str(at))}</th>{tds}</tr>')
    return (f'<table style="border-collapse: collapse; width: 100%; table-layout: fixed">'
            f'<thead><tr><th style="{CELL_STYLE}; width: 7em">{key}</th>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>')
