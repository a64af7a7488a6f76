"""Does the KL guard stop the runs that would have won? Its verdicts on every run of the curve tables, no training.

    python -m benchmarks.kl_guard_audit [--tables FILE ...] [--space STUDY] [--out FILE] [--quick]

For each table (default: every ``benchmarks/results/curve_tables/curve_table*.jsonl`` drawn from the default space),
read as the replay reads it (``benchmarks.replay.table``: TRUE quality is a configuration's mean objective over the
table's seeds), the guard of ``--space`` (default ``benchmarks/table_space.yaml``, whose guard every published replay
ran) is walked along each run's training KL as a trial's reporter would walk it
(``benchmarks.replay.trial.guard_stop``), and so is the guard as it stood before its level and confidence bound
(``last_value_rule``: the last update's KL against the threshold, and the fitted trend from it). Reported per table and
rule:

- the **good runs** stopped: runs of the configurations within 5% of the best feasible TRUE value, the runs a search
  must not lose (the goal: at most 5%);
- the **feasible runs** stopped: runs that end within the study's KL budget without diverging;
- the **blown-up runs** caught: runs that diverge or end over the study's KL budget (its constraint), split into those
  that end over the guard's own threshold (or diverge) and those over the budget only;
- the updates and seconds the guard saves on blown-up runs, and loses on the others, as shares of the table's.

``--quick``: the first 40 rows of the first table, results in ``--out`` or a temporary directory.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.curve_table import TABLE, TABLE_SPACE, space_record
from benchmarks.replay.table import Run, Table, best_true, constraint_reduced, history, keeps, load_table
from benchmarks.replay.trial import guard_stop
from tools.provenance import commit_at_start
from tools.quick_mode import RESULTS, add_quick_argument, results_path
from tuner.study.spec import KLGuard, StudySpec
from tuner.trial.kl_guard import least_squares_slope

OUT = RESULTS / "kl_guard_audit" / "kl_guard_audit.json"
GOOD_FRACTION = 0.95
QUICK_ROWS = 40
Rule = Callable[[Sequence[float], int, KLGuard], "tuple[int, str] | None"]


def last_value_rule(kl: Sequence[float], planned_updates: int, guard: KLGuard) -> tuple[int, str] | None:
    """The guard before its level and bound (to 6415c24): the first update u where KL_u > threshold, or, from
    u >= max(window, min_updates) with KL_u >= fraction * threshold, KL_u + b * (planned - u) > threshold with b the
    fitted slope of the last ``window`` values."""
    for update in range(1, len(kl) + 1):
        now = kl[update - 1]
        if not math.isfinite(now) or now > guard.threshold:
            return update, "threshold"
        if guard.predict and update >= max(guard.min_updates, guard.window) \
                and now >= guard.predict_min_fraction * guard.threshold:
            slope = least_squares_slope(kl[update - guard.window:update])
            if slope > 0 and now + slope * (planned_updates - update) > guard.threshold:
                return update, "trend"
    return None


RULES: dict[str, Rule] = {"shipped": guard_stop, "last_value": last_value_rule}


def blown_up(run: Run, spec: StudySpec) -> bool:
    """The run diverged, or ended over a constraint of the study (its KL budget)."""
    return run.failed or not all(keeps(c, constraint_reduced(run, c)) for c in spec.constraints)


def over_threshold(run: Run, guard: KLGuard) -> bool:
    """The run diverged, or its last ``window`` updates' KL ended above the guard's threshold: a blow-up by the
    guard's own measure, not only a run that overshot the study's budget."""
    kl = history(run, guard.metric, run.updates)
    recent = kl[-guard.window:]
    return run.failed or not recent or sum(recent) / len(recent) > guard.threshold


def share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def audit_rule(table: Table, spec: StudySpec, rule: Rule) -> dict[str, Any]:
    """One rule's verdicts on every run of the table (see the module docstring)."""
    guard = spec.kl_guard
    target = GOOD_FRACTION * best_true(table)
    good_ids = {cid for cid, config in table.configs.items() if config.true_feasible and config.true_value >= target}
    counts = {"good": [0, 0], "feasible": [0, 0], "blown_up": [0, 0], "over_threshold": [0, 0],
              "over_budget_only": [0, 0]}
    updates = {"total": 0, "saved_on_blown_up": 0, "lost_on_others": 0}
    seconds = {"total": 0.0, "saved_on_blown_up": 0.0, "lost_on_others": 0.0}
    for cid, config in table.configs.items():
        for run in config.runs.values():
            stop = rule(history(run, guard.metric, run.updates), run.planned_updates, guard)
            stopped_at = stop[0] if stop is not None else None
            updates["total"] += run.updates
            seconds["total"] += run.seconds
            kinds = []
            if cid in good_ids:
                kinds.append("good")
            if blown_up(run, spec):
                kinds += ["blown_up", "over_threshold" if over_threshold(run, guard) else "over_budget_only"]
            else:
                kinds.append("feasible")
            for kind in kinds:
                counts[kind][0] += stop is not None
                counts[kind][1] += 1
            if stopped_at is not None:
                spared = run.updates - stopped_at
                key = "saved_on_blown_up" if "blown_up" in kinds else "lost_on_others"
                updates[key] += spared
                seconds[key] += run.seconds - run.cost(stopped_at)[1]
    return {
        **{kind: {"stopped": stopped, "runs": runs, "share": share(stopped, runs)}
           for kind, (stopped, runs) in counts.items()},
        "updates": updates, "seconds": {key: round(value, 1) for key, value in seconds.items()},
        "saved_share": share(updates["saved_on_blown_up"], updates["total"]),
        "lost_share": share(updates["lost_on_others"], updates["total"]),
    }


def audit_table(path: Path, spec: StudySpec, rows: int | None = None) -> dict[str, Any]:
    table = load_table(path, spec.objectives[0], spec.constraints, rows, spec.base)
    task_seeds = sorted({seed[0] for seed in table.seeds})
    return {"table": str(path.relative_to(RESULTS.parent.parent) if path.is_relative_to(RESULTS.parent.parent)
                          else path),
            "task_seeds": task_seeds, "configs": len(table.configs), "seeds": len(table.seeds),
            "best_true": best_true(table),
            "rules": {name: audit_rule(table, spec, rule) for name, rule in RULES.items()}}


def default_tables() -> list[Path]:
    """Every committed curve table drawn from the default space (the graph tables). A table whose record beside it
    names another space (the text table's) is audited with that space's guard: ``--tables T --space S``."""
    return sorted(path for path in TABLE.parent.glob("curve_table*.jsonl") if drawn_from(path) == TABLE_SPACE.name)


def drawn_from(table: Path) -> str:
    """The name of the space file a table was drawn from, as recorded beside it; the default's without a record
    (the tables built before records were kept)."""
    record = space_record(table)
    return str(json.loads(record.read_text())["space"]) if record.is_file() else TABLE_SPACE.name


def markdown(result: dict[str, Any]) -> str:
    lines = ["| table | rule | good runs stopped | feasible runs stopped | blown-up caught (over threshold; over "
             "budget only) | updates saved / lost |", "|---|---|---|---|---|---|"]

    def cell(entry: dict[str, Any]) -> str:
        return f"{entry['stopped']}/{entry['runs']}"

    for table in result["tables"]:
        for name, figures in table["rules"].items():
            lines.append(
                f"| {Path(table['table']).name} | {name} | {cell(figures['good'])} | {cell(figures['feasible'])} | "
                f"{cell(figures['blown_up'])} ({cell(figures['over_threshold'])}; "
                f"{cell(figures['over_budget_only'])}) | {100 * (figures['saved_share'] or 0):.1f}% / "
                f"{100 * (figures['lost_share'] or 0):.1f}% |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.kl_guard_audit", description=__doc__.split("\n")[0])
    parser.add_argument("--tables", type=Path, nargs="+", default=None)
    parser.add_argument("--space", type=Path, default=TABLE_SPACE)
    parser.add_argument("--out", type=Path, default=None)
    add_quick_argument(parser)
    args = parser.parse_args(argv)
    from tuner.study.study_file import StudySpecError, load_study_spec

    try:
        spec = load_study_spec(args.space)
    except StudySpecError as error:
        parser.exit(2, f"--space: {error}\n")
    tables = args.tables or default_tables()
    missing = [str(path) for path in tables if not path.is_file()]
    if missing:
        parser.exit(2, f"--tables: no such file: {', '.join(missing)}\n")
    if args.quick:
        tables = tables[:1]
    result = {"guard": dataclasses.asdict(spec.kl_guard), "space": str(args.space),
              "good_fraction": GOOD_FRACTION, "quick": args.quick, "code": commit_at_start(),
              "tables": [audit_table(path.resolve(), spec, QUICK_ROWS if args.quick else None) for path in tables]}
    out = results_path(args.out, OUT, args.quick)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(markdown(result))


if __name__ == "__main__":
    main()
