"""How fast the dashboard reads a big study: 200 trials x 200 updates by default.

Builds a synthetic study in a temporary SQLite file with the tuner's own writers (Optuna trials with
their attributes and intermediate values, ``tuner.trial_records`` metrics and samples), then times the
dashboard's read path: the first (cold) read, the per-rerun refresh of an unchanged and of a
growing study, the derived tables and charts, and each page rendered by Streamlit's AppTest::

    python -m benchmarks.dashboard_read                      # 200 x 200
    python -m benchmarks.dashboard_read --trials 50 --updates 100 --repeat 3
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
APP = REPO / "dashboard" / "app.py"
PAGE_ORDER = ("study", "curves", "samples", "compare", "health", "analysis")


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, result


def median_time(action: Callable[[], Any], repeat: int) -> float:
    return statistics.median(timed(action)[0] for _ in range(repeat))


def read_path(url: str, name: str, repeat: int) -> list[tuple[str, float]]:
    """Times of the plain loaders, charts and health rules (no Streamlit)."""
    from dashboard.charts import CurveStyle, curves_figure, kl_figure
    from dashboard.health_rules import HealthContext, diagnose_trials
    from dashboard.study_reader import StudyRef, build_study_view, open_reader
    from tuner.database import create_engine
    from tuner.trial_records import TrialStore

    rows: list[tuple[str, float]] = []
    seconds, reader = timed(lambda: open_reader(StudyRef(url, name)))
    rows.append(("open read-only storage and study", seconds))
    seconds, snapshot = timed(reader.refresh)
    rows.append((f"first read of the {len(snapshot.trials)} trials (Optuna)", seconds))
    seconds, view = timed(lambda: build_study_view(reader.ref, snapshot))
    rows.append(("trial table, configs, best trial", seconds))
    seconds, metrics = timed(reader.metrics)
    rows.append((f"first read of the {len(metrics)} metric rows", seconds))
    seconds, samples = timed(reader.samples)
    rows.append((f"first read of the {len(samples)} samples", seconds))
    rows.append(("refresh, nothing new (every rerun)", median_time(lambda: (reader.refresh(), reader.metrics()),
                                                                   repeat)))

    # A running trial: one more update per refresh, as a worker would write it.
    writer = create_engine(url)
    last = metrics.iloc[-1]
    store = TrialStore(writer, name, int(last["trial_id"]), int(last["trial_number"]))
    next_update = [int(last["update"]) + 1000]

    def grow_and_refresh() -> None:
        store.write_metrics(next_update[0], {"episode": 0.0, "objective/kl": 1.0, "objective/scores": 0.5})
        next_update[0] += 1
        reader.refresh()
        reader.metrics()

    grow_and_refresh()  # the first append also grows the frame's index once
    rows.append(("refresh after one new update (running study)", median_time(grow_and_refresh, repeat)))
    writer.dispose()

    metrics, states = reader.metrics(), view.states()
    style = CurveStyle()
    rows.append((f"KL chart, {len(states)} trials", median_time(
        lambda: kl_figure(metrics, states, style, view.kl_guard.threshold, view.kl_targets()), repeat)))
    rows.append(("proxy score chart, smoothed", median_time(
        lambda: curves_figure(metrics, "objective/scores", states, CurveStyle(smoothing=0.9)), repeat)))
    contexts = {n: HealthContext(view.kl_guard.threshold, view.kl_guard.metric, view.kl_targets().get(n))
                for n in view.numbers}
    rows.append(("health rules, every trial", median_time(lambda: diagnose_trials(metrics, contexts), repeat)))
    return rows


def pages(url: str, name: str) -> list[tuple[str, float]]:
    """Each page rendered by AppTest: opened with empty caches (the study read from scratch), then rerun."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from dashboard.launch import STORAGE_ENV

    os.environ[STORAGE_ENV] = url
    rows = []
    for page in PAGE_ORDER:
        st.cache_data.clear()
        st.cache_resource.clear()
        app = AppTest.from_file(str(APP), default_timeout=120)
        app.query_params["study"] = name
        if page != "study":
            # AppTest needs one run to learn the pages; the caches are emptied again before the timed one.
            app.run()
            app.switch_page(f"app_pages/{page}.py")
            st.cache_data.clear()
            st.cache_resource.clear()
        seconds, _ = timed(app.run)
        if app.exception:
            raise RuntimeError(f"{page}: {app.exception[0].value}")
        rows.append((f"page {page}: open, empty caches", seconds))
        rows.append((f"page {page}: rerun", timed(app.run)[0]))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dashboard_read", description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5, help="Runs per timing of the warm steps (median).")
    parser.add_argument("--keep", type=Path, default=None, help="Build the study in this directory and keep it.")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    # Imports are paid once when the server starts, not when a page opens: take them out of the timings.
    import dashboard.app
    import dashboard.ui  # noqa: F401
    from tools.demo_study import DemoSpec, build_demo_study

    logging.disable(logging.WARNING)  # AppTest and Streamlit's caches warn about their bare mode on every run

    with tempfile.TemporaryDirectory() as scratch:
        directory = args.keep or Path(scratch)
        directory.mkdir(parents=True, exist_ok=True)
        url = f"sqlite:///{directory / 'bench.db'}"
        name = f"bench-{args.trials}x{args.updates}"
        # Every trial runs all its updates (none pruned): the most rows a study of this size can hold.
        spec = DemoSpec(name=name, n_trials=args.trials, n_updates=args.updates,
                        sample_every=max(1, args.updates // 10), stop_trials=False)
        build_s, _ = timed(lambda: build_demo_study(url, spec))
        rows = read_path(url, name, args.repeat) + pages(url, name)
    width = max(len(label) for label, _ in rows)
    print(f"dashboard read path: {args.trials} trials x {args.updates} updates, SQLite, {os.cpu_count()} CPUs "
          f"(study built in {build_s:.1f} s, not counted)")
    print(f"{'step':<{width}}  seconds")
    for label, seconds in rows:
        print(f"{label:<{width}}  {seconds:7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
