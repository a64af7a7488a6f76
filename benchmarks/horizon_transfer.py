"""From the short trial to the long run: a study's best configurations run at 1x, 2x, 4x and 8x their length, each
carried by every rule of ``tuner.production.horizon``, against the best a direct search at the long length finds.

    python -m benchmarks.horizon_transfer --source NAME=STORAGE [--source ...] [--top 3] [--horizons 1 2 4 8]
                                          [--seeds 3] [--rules R ...] [--reference NAME=STORAGE | --reference-trials
                                          30 | --no-reference] [--reference-horizon 4] [--workers 2] [--work-dir DIR]
                                          [--out FILE] [--quick]

For each source study (a finished study, e.g. ``studies/quickstart.yaml``'s, or one of ``benchmarks.tuning_quality``'s)
the ``--top`` best distinct configurations (completed, within the study's constraints, by the first objective; a racing
study's as its race ranks them, on all their runs) are read with their resolved config and the KL their first run ended
at (``tuner.production.carry.final_kl``: the last ``eval/kl``). Each is carried to ``h`` times its ``total_episodes`` by
each rule, and trained to the end on ``--seeds`` fresh seeds (1000, 1001, ...; the seeds ``ppo-tune validate`` starts
from), one CPU thread a run, ``--workers`` at a time (``benchmarks.curve_table.run_curve``, which keeps every
evaluation). At 1x the rules that change nothing but the length are one run. Each run is judged as its source study
judges a trial: the study's first objective and its constraints, reduced over the run's held-out evaluations
(``tuner.study.reduction``). A KL budget is held as it is at any length (the quickstart's 5 nats on the final policy): a
production run is held to the budget its trial was.

The reference is the best that searching directly at ``--reference-horizon`` times the length finds: either a
finished, validated study given with ``--reference``, or one this command runs (``--reference-trials``: the first
source's study file with ``total_episodes`` multiplied, run as ``ppo-tune run --workers W`` runs it and validated as
``ppo-tune validate --top-k 1 --seeds 5`` validates it). Runs are appended to ``runs.jsonl`` in ``--work-dir`` as
they end, so a rerun with the same ``--work-dir`` resumes. ``--no-reference`` carries without one, where a search at
the long length costs too much (a real model): the gap is then not reported.

Reported, per rule and horizon: each configuration's mean value on the seeds (95% t interval), its mean final KL and
the share of runs within the constraints; the gap of the mean from the reference, (mean - reference) / |reference|;
and, paired by configuration and seed, the difference from the ``as_tuned`` run.

``--quick``: one tiny source study of 1 trial and a reference search of 1, on the tiny task, 1 configuration, horizons 1
and 2, 1 seed, in a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common.json_safe import json_safe
from benchmarks.common.machine import machine_facts
from benchmarks.curve_table import QUICKSTART
from tools.provenance import command_line
from tools.quick_mode import RESULTS, add_quick_argument, results_path
from tuner.production.confidence import mean_interval

FIRST_SEED = 1000
FULL: dict[str, Any] = {"top": 3, "horizons": [1, 2, 4, 8], "seeds": 3, "reference_horizon": 4, "workers": 2}
QUICK: dict[str, Any] = {"top": 1, "horizons": [1, 2], "seeds": 1, "reference_horizon": 2, "workers": 1}
QUICK_BASE = {"task": "shortest_path_tiny", "total_episodes": 32, "num_eval_samples": 2}
QUICK_TRIALS = 1
QUICK_LEARNER = {"learning_rate": 2e-4, "num_ppo_epochs": 10}
REFERENCE_SEEDS = 5
"""Fresh seeds the reference's chosen configuration is validated on, as ``ppo-tune validate`` does by default."""


@dataclass(frozen=True)
class Winner:
    """One of a source study's best configurations: where it came from, its resolved config, its value and the
    held-out KL its run ended at."""

    source: str
    trial: int
    value: float
    config: dict[str, Any]
    final_kl: float


def named_storage(text: str) -> tuple[str, str]:
    """``NAME=STORAGE`` as (name, storage URL)."""
    name, separator, storage = text.partition("=")
    if not separator or not name or not storage:
        raise argparse.ArgumentTypeError(f"expected NAME=STORAGE_URL, got {text!r}")
    return name, storage


class SourceError(Exception):
    """A ``--source`` that cannot be read or carried: the command refuses it in one line, exit 2."""


def ranked_configurations(name: str, storage: str, pick: Callable[[list[Any]], list[Any]],
                          feasible_only: bool = True) -> list[Winner]:
    """The study's distinct completed configurations, best first as the study ranks them, narrowed by ``pick``, each
    with its resolved config, its value and the held-out KL its first run ended at (NaN when it stored none).

    A study that races (``tuner.study.seed_policy``) ranks a configuration on all its runs, as ``ppo-tune best`` and
    ``validate`` do: every run within the constraints first, then more seeds, then the mean, which is its value here.
    Ranked by each configuration's first run instead, SmolLM2's third look put first the configuration its race had
    thrown out. Otherwise each configuration's run is ranked by its first objective. With ``feasible_only``, only
    configurations within the constraints (under a race: every run)."""
    import optuna

    from tuner.production.carry import final_kl
    from tuner.store.attrs import RACE_OF_ATTR
    from tuner.store.database import StorageError, open_read_only_engine, open_read_only_storage
    from tuner.store.records import read_stored_metrics
    from tuner.study.constraints import feasible
    from tuner.study.reports import trial_config
    from tuner.study.winner import read_winner

    try:
        study = optuna.load_study(study_name=name, storage=open_read_only_storage(storage))
    except StorageError as error:
        raise SourceError(f"--source {name}: {error}") from None
    except KeyError:  # Optuna's word for a study the storage does not hold
        raise SourceError(f"--source {name}: no study {name!r} in {storage}") from None
    ordered: list[tuple[Any, float]]
    winner = read_winner(study)
    if winner.racing:
        ordered = [(config.root, config.mean) for config in winner.race if config.feasible or not feasible_only]
    else:
        sign = 1.0 if study.directions[0] == optuna.study.StudyDirection.MAXIMIZE else -1.0
        done = [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
                if (feasible(t) or not feasible_only) and RACE_OF_ATTR not in t.user_attrs]
        ordered = [(t, float(t.values[0])) for t in sorted(done, key=lambda t: -sign * t.values[0])]
    distinct: list[tuple[Any, float]] = []
    seen: list[dict[str, Any]] = []
    for trial, value in ordered:
        if trial.params not in seen:
            seen.append(trial.params)
            distinct.append((trial, value))
    chosen = pick(distinct)
    metrics = read_stored_metrics(open_read_only_engine(storage), name, [t.number for t, _ in chosen])
    return [Winner(name, trial.number, value, trial_config(trial),
                   final_kl(metrics[metrics["trial_number"] == trial.number])) for trial, value in chosen]


def winners(name: str, storage: str, top: int) -> list[Winner]:
    """The study's ``top`` best distinct configurations (see the module's docstring), best first."""
    found = ranked_configurations(name, storage, lambda ranked: ranked[:top])
    for winner in found:
        if math.isnan(winner.final_kl):
            raise SourceError(f"--source {name}: trial {winner.trial} stored no KL to carry")
    return found


def study_spec(name: str, storage: str) -> Any:
    """The source study's spec as stored on it (its objectives and constraints judge the carried runs)."""
    import optuna

    from tuner.store.database import open_read_only_storage
    from tuner.study.spec_record import rebuilt_spec

    return rebuilt_spec(optuna.load_study(study_name=name, storage=open_read_only_storage(storage)), storage)


def history(row: dict[str, Any], metric: str) -> list[float]:
    """A metric's values over a run (one per update that reported it): the held-out ones from its evaluations, the
    training ones from every update."""
    if metric in row["train"]:
        return [v for v in row["train"][metric] if v is not None]
    return [e[metric] for e in row["evals"] if e.get(metric) is not None]


def run_value(row: dict[str, Any], spec: Any) -> tuple[float, bool, float]:
    """(the first objective, whether the run finished within every constraint, the final held-out KL) of a run, each
    reduced as the study reduces a trial's metrics."""
    from tuner.study.constraints import constraint_values
    from tuner.study.reduction import reduce_history

    value = reduce_history(history(row, spec.objectives[0].metric), spec.objectives[0])
    kept = row["failure"] is None and all(
        bound <= 0 for c in spec.constraints for bound in constraint_values(c, reduce_history(history(row, c.metric),
                                                                                              c)).values())
    kls = history(row, "eval/kl")
    return float(value), bool(kept), float(kls[-1]) if kls else float("nan")


def job_key(job: dict[str, Any]) -> tuple[str, int, str, int, int]:
    params = job["params"]
    return params["source"], params["trial"], params["rule"], params["horizon"], job["seed"]


def transfer_jobs(found: Sequence[Winner], horizons: Sequence[int], rules: Sequence[str], seeds: int,
                  output_dir: str) -> Iterator[dict[str, Any]]:
    """One ``run_curve`` job per (configuration, horizon, rule, seed); rules that give the same config at a horizon
    share the first one's runs (its ``same_as``)."""
    from tuner.production.horizon import RULES

    for winner in found:
        for horizon in horizons:
            length = int(winner.config["total_episodes"]) * horizon
            carried = {}
            for rule in rules:
                try:
                    carried[rule] = RULES[rule](winner.config, length, winner.final_kl)
                except ValueError as error:  # e.g. kl_held for a run that ended at no KL: no runs, said once
                    if horizon == horizons[0]:
                        print(f"{winner.source} #{winner.trial}: {rule} does not apply: {error}", file=sys.stderr)
            for rule in carried:
                twins = [other for other in carried if carried[other].config == carried[rule].config]
                if twins[0] != rule:
                    continue
                for index in range(seeds):
                    yield {"config_id": f"{winner.source}:{winner.trial}:{rule}:{horizon}",
                           "params": {"source": winner.source, "trial": winner.trial, "rule": rule,
                                      "horizon": horizon, "same_as": twins[1:],
                                      "changes": {c.name: c.carried for c in carried[rule].changes}},
                           "base": carried[rule].config, "fields": {}, "seed": FIRST_SEED + index,
                           "task_seed": carried[rule].config.get("task_seed", 0),
                           "eval_steps": carried[rule].config["eval_steps"], "output_dir": output_dir}


def ran(path: Path) -> dict[tuple[str, int, str, int, int], dict[str, Any]]:
    if not path.exists():
        return {}
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {(r["params"]["source"], r["params"]["trial"], r["params"]["rule"], r["params"]["horizon"], r["seed"]): r
            for r in rows}


def search(definition: dict[str, Any], path: Path, workers: int, validation_seeds: int) -> tuple[str, str]:
    """Write ``definition`` to ``path`` and run it as ``ppo-tune run PATH --workers W`` does (``tuner.run.runner.
    run_study``: with one worker, in this process), then, with ``validation_seeds``, validate its best configuration
    as ``ppo-tune validate NAME --top-k 1`` does, in this process; (name, storage). A study that does not finish
    stops the benchmark."""
    from tuner.production.local_validation import validate_here
    from tuner.run.runner import run_study
    from tuner.study.study_file import load_study_spec

    definition.pop("timeout", None)
    path.write_text(yaml.safe_dump(definition, sort_keys=False))
    spec = load_study_spec(path)
    status = run_study(spec, spec.n_trials, None, workers)
    if status != 0:
        raise SystemExit(f"the study {spec.name!r} ({path}) ended with status {status}")
    if validation_seeds:
        validate_here(spec.name, spec.storage, top_k=1, seeds=validation_seeds, threads=1)
    return spec.name, spec.storage


def run_reference(source: tuple[str, str], factor: int, trials: int, work_dir: Path, workers: int,
                  seeds: int) -> tuple[str, str]:
    """A direct search at ``factor`` times the first source's length: its study file (stored on the study) with
    ``total_episodes`` multiplied and ``trials`` trials, run and validated on ``seeds`` fresh seeds; (name,
    storage)."""
    import optuna

    from tuner.store.database import open_read_only_storage
    from tuner.study.stored_spec import stored_spec_mapping

    name, storage = source
    study = optuna.load_study(study_name=name, storage=open_read_only_storage(storage))
    definition = dict(stored_spec_mapping(study.user_attrs) or {})
    if not definition:
        raise SystemExit(f"--source {name}: no study file stored on it to search again at {factor}x")
    reference = f"{name}-{factor}x"
    base = {**definition["base"], "total_episodes": int(definition["base"]["total_episodes"]) * factor}
    definition.update(name=reference, storage=f"sqlite:///{work_dir / reference}.db", n_trials=trials, base=base)
    return search(definition, work_dir / f"{reference}.yaml", workers, seeds)


def reference_value(name: str, storage: str) -> dict[str, Any]:
    """The reference study's validated best: its trial, validated mean and interval."""
    import optuna

    from tuner.production.validation import load_validation, validation_results
    from tuner.store.database import open_read_only_storage

    opened = open_read_only_storage(storage)
    study = optuna.load_study(study_name=name, storage=opened)
    validated = [r for r in validation_results(study, load_validation(name, opened)) if r.n > 0]
    if not validated:
        raise SystemExit(f"--reference {name}: no validated configuration (run ppo-tune validate {name} first)")
    mean, low, high = validated[0].interval
    return {"study": name, "trial": validated[0].trial, "mean": mean, "ci_low": low, "ci_high": high,
            "n": validated[0].n}


def summarise(rows: list[dict[str, Any]], found: Sequence[Winner], rules: Sequence[str], horizons: Sequence[int],
              reference: float | None) -> list[dict[str, Any]]:
    """One entry per (configuration, horizon, rule): values on the seeds, mean and interval, mean final KL, share
    within constraints, gap from the reference (None without one), and the paired difference from as_tuned on the
    same seeds."""
    by_key: dict[tuple[str, int, str, int], list[dict[str, Any]]] = {}
    for row in rows:
        p = row["params"]
        for rule in [p["rule"], *p["same_as"]]:
            by_key.setdefault((p["source"], p["trial"], rule, p["horizon"]), []).append(row)
    entries = []
    for winner in found:
        for horizon in horizons:
            plain = {r["seed"]: r["value"] for r in by_key.get((winner.source, winner.trial, "as_tuned", horizon), [])}
            for rule in rules:
                runs = sorted(by_key.get((winner.source, winner.trial, rule, horizon), []), key=lambda r: r["seed"])
                values = [r["value"] for r in runs]
                mean, low, high = mean_interval(values)
                paired = [r["value"] - plain[r["seed"]] for r in runs if r["seed"] in plain]
                entries.append({
                    "source": winner.source, "trial": winner.trial, "rank": found.index(winner), "rule": rule,
                    "horizon": horizon, "n": len(values), "values": values, "mean": mean, "ci_low": low,
                    "ci_high": high, "final_kl": statistics.fmean(r["final_kl"] for r in runs) if runs else None,
                    "within_constraints": statistics.fmean(r["kept"] for r in runs) if runs else None,
                    "gap": (mean - reference) / abs(reference) if values and reference is not None else None,
                    "vs_as_tuned": dict(zip(("mean", "ci_low", "ci_high"), mean_interval(paired), strict=True)),
                    "seconds": statistics.fmean(r["seconds"] for r in runs) if runs else None,
                })
    return entries


def markdown(entries: list[dict[str, Any]], reference: dict[str, Any] | None) -> str:
    def number(value: float | None, digits: int = 4) -> str:
        return "-" if value is None or value != value else f"{value:.{digits}f}"

    def gap(value: float | None) -> str:
        return "-" if value is None or value != value else f"{value:+.1%}"

    head = "Reference: none (--no-reference)" if reference is None else (
        f"Reference: {reference['study']} trial {reference['trial']}, validated mean {number(reference['mean'])} "
        f"[{number(reference['ci_low'])}, {number(reference['ci_high'])}] ({reference['n']} seeds)")
    lines = [head, "",
             "| configuration | horizon | rule | value: mean [95% CI] (runs) | gap from reference | final KL "
             "| within constraints | minus as tuned, paired [95% CI] |", "|---|---|---|---|---|---|---|---|"]
    for e in entries:
        paired = e["vs_as_tuned"]
        lines.append(f"| {e['source']} #{e['trial']} | {e['horizon']}x | {e['rule']} | {number(e['mean'])} "
                     f"[{number(e['ci_low'])}, {number(e['ci_high'])}] ({e['n']}) | "
                     f"{gap(e['gap'])} | {number(e['final_kl'], 2)} | "
                     f"{number(e['within_constraints'], 2)} | {number(paired['mean'])} [{number(paired['ci_low'])}, "
                     f"{number(paired['ci_high'])}] |")
    return "\n".join(lines)


def quick_source(work_dir: Path) -> tuple[str, str]:
    """A tiny study of the quickstart's space on the tiny task, its one trial a fast learner (so that its run ends
    at a KL above zero for ``kl_held`` to hold)."""
    definition = yaml.safe_load(QUICKSTART.read_text())
    definition.update(name="source", storage=f"sqlite:///{work_dir / 'source'}.db", n_trials=QUICK_TRIALS,
                      base={**definition["base"], **QUICK_BASE}, enqueue=[QUICK_LEARNER])
    return search(definition, work_dir / "source.yaml", 1, 0)


def checked_settings(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, Any]:
    """The run's settings (the quick or full defaults, with the arguments given on top); a wrong one ends the run
    through ``parser.error`` (one line, exit 2)."""
    settings = {**(QUICK if args.quick else FULL),
                **{k: v for k, v in vars(args).items() if k in FULL and v is not None}}
    for name in ("top", "seeds", "workers", "reference_horizon"):
        if settings[name] < 1:
            parser.error(f"--{name.replace('_', '-')}: must be at least 1, got {settings[name]}")
    if any(h < 1 for h in settings["horizons"]):
        parser.error(f"--horizons: each must be at least 1, got {settings['horizons']}")
    if not args.quick and not args.source:
        parser.error("--source: name at least one finished study (NAME=STORAGE)")
    if not args.quick and sum((args.reference is not None, args.reference_trials is not None, args.no_reference)) != 1:
        parser.error("give --reference NAME=STORAGE, --reference-trials N or --no-reference (one of them)")
    return settings


def main(argv: list[str] | None = None) -> None:
    from tuner.production.horizon import RULES

    parser = argparse.ArgumentParser(prog="python -m benchmarks.horizon_transfer",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=named_storage, action="append", default=None, metavar="NAME=STORAGE",
                        help="A finished study whose best configurations are carried (repeatable).")
    parser.add_argument("--top", type=int, default=None, help=f"Configurations per source (default {FULL['top']}).")
    parser.add_argument("--horizons", type=int, nargs="+", default=None,
                        help=f"Multiples of the tuned length (default {' '.join(map(str, FULL['horizons']))}).")
    parser.add_argument("--seeds", type=int, default=None, help=f"Fresh seeds per run (default {FULL['seeds']}).")
    parser.add_argument("--rules", nargs="+", choices=tuple(RULES), default=list(RULES))
    parser.add_argument("--reference", type=named_storage, default=None, metavar="NAME=STORAGE",
                        help="A finished, validated study searched at the reference horizon.")
    parser.add_argument("--reference-trials", type=int, default=None,
                        help="Run the reference search here with this many trials (instead of --reference).")
    parser.add_argument("--no-reference", action="store_true",
                        help="Carry the runs without a reference search (where a search at the long length costs "
                             "too much, as on a real model): values, KL and the pairing with as_tuned only.")
    parser.add_argument("--reference-horizon", type=int, default=None,
                        help=f"The reference's multiple of the tuned length (default {FULL['reference_horizon']}).")
    parser.add_argument("--workers", type=int, default=None, help=f"Runs at a time (default {FULL['workers']}).")
    parser.add_argument("--work-dir", type=Path, default=None, help="Where runs.jsonl and the reference study go.")
    add_quick_argument(parser)
    parser.add_argument("--out", default=None, help="Results file (default "
                                                    "benchmarks/results/horizon_transfer/horizon_transfer.json).")
    args = parser.parse_args(argv)
    settings = checked_settings(parser, args)
    out = results_path(args.out, RESULTS / "horizon_transfer" / "horizon_transfer.json", args.quick)
    try:  # the sources are read before anything is made
        found = [w for name, storage in args.source or [] for w in winners(name, storage, settings["top"])]
    except SourceError as error:
        parser.error(str(error))
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="ppo-horizon-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    sources = args.source or [quick_source(work_dir)]
    if args.quick and args.reference_trials is None and args.reference is None and not args.no_reference:
        args.reference_trials = QUICK_TRIALS
    if not args.source:  # the quick source, made above
        name, storage = sources[0]
        found = winners(name, storage, settings["top"])
    reference_result = None
    if not args.no_reference:
        reference = args.reference or run_reference(sources[0], settings["reference_horizon"], args.reference_trials,
                                                    work_dir, settings["workers"], 1 if args.quick else REFERENCE_SEEDS)
        reference_result = reference_value(*reference)
    from benchmarks.curve_table import append_runs

    runs_path = work_dir / "runs.jsonl"
    done = ran(runs_path)
    work = [job for job in transfer_jobs(found, settings["horizons"], args.rules, settings["seeds"],
                                         str(work_dir / "runs")) if job_key(job) not in done]
    print(f"{len(work)} runs to go ({len(done)} done) in {runs_path}", file=sys.stderr)
    append_runs(runs_path, work, settings["workers"])
    specs = {name: study_spec(name, storage) for name, storage in sources}
    rows = []
    for key, row in ran(runs_path).items():
        if key[0] in specs and key[3] in settings["horizons"]:
            value, kept, final_kl = run_value(row, specs[key[0]])
            rows.append({**row, "value": value, "kept": kept, "final_kl": final_kl})
    entries = summarise(rows, found, args.rules, settings["horizons"],
                        None if reference_result is None else reference_result["mean"])
    table = markdown(entries, reference_result)
    print(table)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(json_safe({
        "command": command_line("benchmarks.horizon_transfer", argv),
        "machine": machine_facts("cpu"), "settings": {**settings, "quick": args.quick, "rules": args.rules,
                                                      "work_dir": str(work_dir)},
        "wall_s": round(time.perf_counter() - started, 1), "reference": reference_result,
        "winners": [{"source": w.source, "trial": w.trial, "value": w.value, "final_kl": w.final_kl} for w in found],
        "entries": entries, "table": table,
    }), indent=2, default=str))
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    from tuner.trial.frozen_heap import run_as_process

    run_as_process(main)
