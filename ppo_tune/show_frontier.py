"""``ppo-tune show`` with the Frontier page's reading: where held-out gold peaks in KL over every trial of the study,
or why no peak is named, in the page's own words (``dashboard.frontier_reading``).

``show``'s table comes from the tuner, which knows nothing of the dashboard; the search's line there says where its
latest proposal aimed, from the trials it had then. A user who tunes on a cluster without a browser, before choosing a
KL budget from a study that mapped the frontier, needs the reading the Frontier page and the Health advice give, from
all of the study's trials: the same function reads it here.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from tuner.cli.common import find_named_study
from tuner.cli.study_commands import show_study

if TYPE_CHECKING:
    import pandas as pd


def frontier_words(metrics: pd.DataFrame) -> str | None:
    """The Frontier page's headline on a study's ``metrics`` frame; None for a study that records no held-out gold
    and KL."""
    from dashboard.frontier_reading import headline
    from tuner.search.peak_reading import read_metrics_peak

    reading = read_metrics_peak(metrics)
    return None if reading is None else headline(reading).words


def show_with_frontier(args: argparse.Namespace) -> int:
    """``ppo-tune show``: the tuner's table and findings, then the Frontier reading of the study's gold in KL. The
    study is looked up once, so a storage that cannot be read is reported once, and its metrics are read once for
    both."""
    # Imported here: the reading loads pandas, which a mistyped command line must not wait for.
    from dashboard.study_reader import StudyRef, open_reader

    study, url, _ = find_named_study(args.name, args.storage, args.command)
    metrics = open_reader(StudyRef(url, args.name)).metrics()
    show_study(study, args.name, metrics)
    words = frontier_words(metrics)  # None for a study with no trials, as for one without gold
    if words is not None:
        from tuner.search.frontier_points import frontier_source

        judge = frontier_source(metrics).judge_name
        print(f"frontier (the dashboard's reading of every trial's held-out {judge} in KL): {words}")
    return 0


__all__ = ["frontier_words", "show_with_frontier"]
