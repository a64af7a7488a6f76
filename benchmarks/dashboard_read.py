"""How fast the dashboard reads a big study: 200 trials x 200 updates by default.

Builds a synthetic study in a temporary SQLite file with the tuner's own writers (Optuna trials with
their attributes and intermediate values, ``tuner.store.records`` metrics and samples), then times the
dashboard's read path: the first (cold) read, the per-rerun refresh of an unchanged and of a
growing study, the derived tables and charts, and each page rendered by Streamlit's AppTest::

    python -m benchmarks.dashboard_read                      # 200 x 200
    python -m benchmarks.dashboard_read --trials 50 --updates 100 --repeat 3
    python -m benchmarks.dashboard_read --pages curves health \
        --out benchmarks/results/dashboard_read/dashboard_read.json
    python -m benchmarks.dashboard_read --storage postgresql://ppo_tune:ppo_tune@localhost/ppo_tune_test
    python -m benchmarks.dashboard_read --quick --out /tmp/dashboard_read.json   # 3 x 6, every page, once each

Every page of ``dashboard.app.PAGES`` is timed unless ``--pages`` names some. The budget is a cold open
under 1 s and a rerun under 0.3 s; rows over it are marked. Cold opens and reruns are medians over
``--cold-repeat`` and ``--repeat`` runs: the machine is shared, so one run says little.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tools.provenance import commit_at_start
from tools.quick_mode import add_quick_argument, results_path

REPO = Path(__file__).resolve().parent.parent
APP = REPO / "dashboard" / "app.py"
QUICK = {"trials": 3, "updates": 6, "repeat": 1, "cold_repeat": 1}
"""--quick: a 3-trial, 6-update study, every step and page timed once (the budget marks mean nothing at this size)."""
COLD_BUDGET_S = 1.0  # a page opened with empty caches
RERUN_BUDGET_S = 0.3  # a page rerun: a widget changed, or auto-refresh with nothing new


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, result


def median_time(action: Callable[[], Any], repeat: int) -> float:
    return statistics.median(timed(action)[0] for _ in range(repeat))


def read_path(url: str, name: str, repeat: int) -> list[tuple[str, float]]:
    """Times of the plain loaders, charts and health rules (no Streamlit)."""
    from dashboard.charts import CurveStyle, curves_figure, kl_figure
    from dashboard.frames import health_contexts
    from dashboard.health_rules import diagnose_trials
    from dashboard.study_reader import StudyRef, build_study_view, open_reader
    from tuner.store.database import create_engine
    from tuner.store.records import TrialStore

    rows: list[tuple[str, float]] = []
    seconds, reader = timed(lambda: open_reader(StudyRef(url, name)))
    rows.append(("open read-only storage and study", seconds))
    seconds, snapshot = timed(reader.refresh)
    rows.append((f"first read of the {len(snapshot.trials)} trials", seconds))
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
    contexts = health_contexts(view)
    rows.append(("health rules, every trial", median_time(lambda: diagnose_trials(metrics, contexts), repeat)))
    return rows


def _fresh_app(page: str, name: str) -> Any:
    """An AppTest on ``page`` with Streamlit's caches emptied: the study is read from scratch on the next run."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from dashboard.app import PAGES

    app = AppTest.from_file(str(APP), default_timeout=120)
    app.query_params["study"] = name
    if page != PAGES[0][0]:
        # AppTest needs one run to learn the pages; the caches are emptied again before the timed one.
        app.run()
        app.switch_page(f"app_pages/{page}.py")
    st.cache_data.clear()
    st.cache_resource.clear()
    return app


def _run(app: Any, page: str) -> float:
    seconds, _ = timed(app.run)
    if app.exception:
        raise RuntimeError(f"{page}: {app.exception[0].value}")
    return seconds


def pages(url: str, name: str, slugs: list[str], cold_repeat: int, repeat: int) -> list[tuple[str, float]]:
    """Each page rendered by AppTest: opened with empty caches (the study read from scratch), then rerun."""
    from dashboard.serve import STORAGE_ENV

    os.environ[STORAGE_ENV] = url
    rows = []
    for page in slugs:
        cold = []
        for _ in range(cold_repeat):
            app = _fresh_app(page, name)
            cold.append(_run(app, page))
        rows.append((f"page {page}: open, empty caches", statistics.median(cold)))
        rows.append((f"page {page}: rerun", statistics.median(_run(app, page) for _ in range(repeat))))
    return rows


def over_budget(label: str, seconds: float) -> bool:
    if label.startswith("page ") and label.endswith("empty caches"):
        return seconds > COLD_BUDGET_S
    return label.startswith("page ") and label.endswith("rerun") and seconds > RERUN_BUDGET_S


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def delete_study(url: str, name: str) -> None:
    """The benchmark's study out of a shared database: Optuna's rows and the store's."""
    import optuna

    from tuner.store.database import create_engine, open_storage
    from tuner.store.records import metrics_table, samples_table

    optuna.delete_study(study_name=name, storage=open_storage(url))
    engine = create_engine(url)
    with engine.begin() as connection:
        for table in (metrics_table, samples_table):
            connection.execute(table.delete().where(table.c.study_name == name))
    engine.dispose()


def backend(url: str) -> str:
    import sqlalchemy

    return sqlalchemy.engine.make_url(url).get_backend_name()


def write_json(path: Path, args: argparse.Namespace, rows: list[tuple[str, float]], facts: dict[str, Any]) -> None:
    from importlib import metadata

    versions = {p: metadata.version(p) for p in ("optuna", "streamlit", "plotly", "pandas", "sqlalchemy")}
    result = {
        "settings": {"trials": args.trials, "updates": args.updates, "repeat": args.repeat,
                     "cold_repeat": args.cold_repeat, "storage": facts["storage"], "quick": args.quick},
        "machine": {**facts, "logical_cpus": os.cpu_count(), "python": sys.version.split()[0], **versions},
        "budget_s": {"open": COLD_BUDGET_S, "rerun": RERUN_BUDGET_S},
        "rows": [{"step": label, "seconds": round(seconds, 4), "over_budget": over_budget(label, seconds)}
                 for label, seconds in rows],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.dashboard_read", description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=None, help="Default 200 (--quick 3).")
    parser.add_argument("--updates", type=int, default=None, help="Default 200 (--quick 6).")
    parser.add_argument("--repeat", type=int, default=None, help="Runs per timing of the warm steps (median; default "
                                                                 "5, --quick 1).")
    parser.add_argument("--cold-repeat", type=int, default=None, help="Cold opens per page (median; default 3, "
                                                                      "--quick 1).")
    parser.add_argument("--keep", type=Path, default=None, help="Build the study in this directory and keep it.")
    parser.add_argument("--reuse", action="store_true",
                        help="With --keep: time the study already there instead of building it again (each run "
                             "adds a few updates to its last trial: use it while profiling, not for results).")
    parser.add_argument("--storage", default=None,
                        help="Build and time the study in this database (PostgreSQL, say) instead of a temporary "
                             "SQLite file; the study is deleted afterwards.")
    parser.add_argument("--pages", nargs="+", default=None, help="Time these pages only (default: every page).")
    parser.add_argument("--out", type=Path, default=None, help="Write the rows and the machine's load as JSON here "
                                                               "(--quick: always, by default into a temporary "
                                                               "directory).")
    add_quick_argument(parser)
    args = parser.parse_args(argv)
    defaults = QUICK if args.quick else {"trials": 200, "updates": 200, "repeat": 5, "cold_repeat": 3}
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    out = results_path(args.out, Path("dashboard_read.json"), args.quick) if args.out or args.quick else None
    sys.path.insert(0, str(REPO))
    # Imports are paid once when the server starts, not when a page opens: take them out of the timings.
    import dashboard.app
    import dashboard.ui
    from tools.demo_study import DemoSpec, build_demo_study

    logging.disable(logging.WARNING)  # AppTest and Streamlit's caches warn about their bare mode on every run

    with tempfile.TemporaryDirectory() as scratch:
        directory = args.keep or Path(scratch)
        directory.mkdir(parents=True, exist_ok=True)
        url = args.storage or f"sqlite:///{directory / 'bench.db'}"
        # A shared database may hold an earlier run's study, or another user's.
        name = f"bench-{args.trials}x{args.updates}" + (f"-{os.getpid()}" if args.storage else "")
        # Every trial runs all its updates (none pruned): the most rows a study of this size can hold.
        spec = DemoSpec(name=name, n_trials=args.trials, n_updates=args.updates,
                        sample_every=max(1, args.updates // 10), stop_trials=False)
        reuse = args.reuse and args.keep is not None and not args.storage and (directory / "bench.db").is_file()
        slugs = args.pages or [slug for slug, _, _ in dashboard.app.PAGES]
        try:
            build_s, _ = (0.0, None) if reuse else timed(lambda: build_demo_study(url, spec))
            facts: dict[str, Any] = {
                "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                "code": commit_at_start(), "storage": backend(url), "load_average_at_start": load_average(),
            }
            rows = read_path(url, name, args.repeat) + pages(url, name, slugs, args.cold_repeat, args.repeat)
            facts["load_average_at_end"] = load_average()
        finally:
            if args.storage:
                delete_study(url, name)
    width = max(len(label) for label, _ in rows)
    print(f"dashboard read path: {args.trials} trials x {args.updates} updates, {facts['storage']}, "
          f"{os.cpu_count()} CPUs "
          f"(study built in {build_s:.1f} s, not counted); load average {facts['load_average_at_start']} at the "
          f"start, {facts['load_average_at_end']} at the end")
    print(f"{'step':<{width}}  seconds")
    for label, seconds in rows:
        print(f"{label:<{width}}  {seconds:7.3f}" + ("  over budget" if over_budget(label, seconds) else ""))
    if out is not None:
        write_json(out, args, rows, facts)
        print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
