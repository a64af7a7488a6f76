"""The worked example of a user's own task, read from its studies: what tuning a held-out judge bought against tuning
the proxy, on fresh seeds.

``studies/own_task.yaml`` tunes SmolLM2-135M-Instruct on its own prompts, trained on VADER sentiment alone (a reward
that strings of positive words max out), on a held-out judge, the text task's gold. Its twin,
``benchmarks/studies/own_task_proxy.yaml``, is the same study tuned as a study with no judge would be: on the proxy
(``eval/score``) within the same KL budget, with joint TPE, the default a proxy objective gets. Both record the
judge's score of every evaluation; the proxy study never reads it. Each study's winner is validated on 5 fresh seeds
(``ppo-tune validate NAME --top-k 1 --seeds 5``): both studies trained on seeds 0-2, so both validations draw the same
fresh seeds, and the comparison is paired by seed:

    d_s = J_s(judge study's winner) - J_s(proxy study's winner),  J = eval/judge_score, mean of the last 2 evaluations

with its mean and Student's t 95% interval over the seeds (``tuner.production.confidence.mean_interval``). The same is
reported for the proxy, KL and the signs of hacking, and each winner against the untuned policy (:func:`untuned_runs`).

It reads stored studies (from a copy of the database) and trains nothing; the commands that made them are in the
results page. The untuned policy's evaluations are made once and kept (``untuned.json``). ``--quick`` is the same
report, since every part of it is stored.

    python -m benchmarks.own_task            # writes results/own_task/own_task.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna

from benchmarks.common.machine import cpu_model
from ppo_core.metric_names import EVAL_DISTINCT_2, EVAL_JUDGE_SCORE, EVAL_KL, EVAL_REPEATED_3, EVAL_SCORE
from tools.provenance import command_line, commit_at_start
from tuner.production.confidence import mean_interval
from tuner.production.validation import load_validation
from tuner.store.attrs import SEED_ATTR, VALIDATES_ATTR
from tuner.store.database import create_engine, open_storage
from tuner.store.records import read_metrics
from tuner.study.winner import read_winner

RESULTS = Path(__file__).parent / "results" / "own_task"
STUDIES = ("own_task", "own_task_proxy")
"""The study that tunes the judge, and its twin that tunes the proxy."""
LAST_K = 2
"""Evaluations each run's score is the mean of, as both studies reduce their objective."""
READ = {"judge": EVAL_JUDGE_SCORE, "proxy": EVAL_SCORE}
"""Read as the objective is: the mean of the last ``LAST_K`` evaluations."""
LAST = {"kl": EVAL_KL, "distinct_2": EVAL_DISTINCT_2, "repeated_3": EVAL_REPEATED_3}
"""Read at the last evaluation."""


def run_figures(metrics: Any) -> dict[str, float]:
    """One run's figures from its metrics rows (one run's, sorted by update): :data:`READ` and :data:`LAST`."""
    evaluated = metrics[metrics[EVAL_SCORE].notna()].sort_values("update")
    figures = {name: float(evaluated[metric].tail(LAST_K).mean()) for name, metric in READ.items()}
    figures.update({name: float(evaluated[metric].iloc[-1]) for name, metric in LAST.items()})
    return figures


def validated_runs(storage: str, name: str) -> dict[int, dict[str, float]]:
    """The validation runs of study ``name``'s winner by seed, each run's figures (:func:`run_figures`)."""
    study = optuna.load_study(study_name=name, storage=open_storage(storage))
    winner = read_winner(study).ranked[0].number
    validation = load_validation(name, open_storage(storage))
    if validation is None:
        return {}
    metrics = read_metrics(create_engine(storage), validation.study_name)
    runs = {}
    for run in validation.get_trials(deepcopy=False):
        if run.state == optuna.trial.TrialState.COMPLETE and run.user_attrs.get(VALIDATES_ATTR) == winner:
            rows = metrics[metrics["trial_number"] == run.number]
            runs[int(run.user_attrs[SEED_ATTR])] = run_figures(rows)
    return runs


def untuned_runs(seeds: Sequence[int], path: Path) -> dict[int, dict[str, float]]:
    """The untuned policy's figures on each seed: the shipped study's base config at that seed, evaluated without
    training at the updates a run of it evaluates (20 and 40), so on the very sampling streams a validation run of
    that seed draws its answers from (``ppo_core.run.evaluation.evaluation_seed``). Kept in ``path`` seed by seed: a
    rerun after an interruption evaluates only the seeds not yet done."""
    import pandas as pd

    from ppo_core import PPOTrainer
    from ppo_core.config.io import build_config
    from tuner.study.study_file import load_study_spec

    done = {int(seed): figures for seed, figures in json.loads(path.read_text()).items()} if path.exists() else {}
    spec = load_study_spec(Path(__file__).parents[1] / "studies" / "own_task.yaml")
    for seed in seeds:
        if seed in done:
            continue
        config = build_config({**spec.base, "seed": seed})
        trainer = PPOTrainer(config)
        rows = [{"update": update, **trainer.evaluate(update)} for update in (20, 40)]
        done[seed] = run_figures(pd.DataFrame(rows))
        path.write_text(json.dumps({str(s): f for s, f in sorted(done.items())}, indent=1) + "\n")
    return {seed: done[seed] for seed in seeds}


def paired(first: dict[int, dict[str, float]], second: dict[int, dict[str, float]]) -> dict[str, Any]:
    """Per figure, the paired difference first - second over the seeds both have: mean and 95% interval."""
    seeds = sorted(set(first) & set(second))
    out: dict[str, Any] = {"seeds": seeds}
    for name in (*READ, *LAST):
        differences = [first[s][name] - second[s][name] for s in seeds]
        mean, low, high = mean_interval(differences) if len(differences) > 1 else (float("nan"),) * 3
        out[name] = {"mean": mean, "ci_low": low, "ci_high": high,
                     "first": statistics.fmean(first[s][name] for s in seeds) if seeds else float("nan"),
                     "second": statistics.fmean(second[s][name] for s in seeds) if seeds else float("nan")}
    return out


def study_summary(storage: str, name: str) -> dict[str, Any]:
    """The study's winner, its parameters, and each configuration's mean judge and proxy over its tuning runs."""
    study = optuna.load_study(study_name=name, storage=open_storage(storage))
    winner = read_winner(study).ranked[0]
    return {"winner": winner.number, "params": winner.params,
            "trials": len(study.get_trials(deepcopy=False)),
            "validated": {str(seed): figures for seed, figures in validated_runs(storage, name).items()}}


def report(database: Path) -> dict[str, Any]:
    """Both studies' winners and their paired comparison on fresh seeds, read from a copy of ``database``."""
    with tempfile.TemporaryDirectory() as directory:
        copy = Path(directory) / database.name
        for side in ("", "-wal", "-shm"):  # a database still being written keeps its latest rows beside it
            if Path(f"{database}{side}").exists():
                shutil.copy(f"{database}{side}", f"{copy}{side}")
        storage = f"sqlite:///{copy}"
        studies = {name: study_summary(storage, name) for name in STUDIES}
        judge, proxy = (validated_runs(storage, name) for name in STUDIES)
    untuned = untuned_runs(sorted(judge), database.parent / "untuned.json")
    return {"studies": studies, "judge_minus_proxy": paired(judge, proxy),
            "judge_minus_untuned": paired(judge, untuned), "proxy_minus_untuned": paired(proxy, untuned),
            "untuned": {str(seed): figures for seed, figures in untuned.items()},
            "same_winner_config": studies[STUDIES[0]]["params"] == studies[STUDIES[1]]["params"]}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", type=Path, default=RESULTS / "study.db")
    parser.add_argument("--out", type=Path, default=RESULTS / "own_task.json")
    parser.add_argument("--quick", action="store_true", help="the same report (it trains nothing)")
    args = parser.parse_args(argv)
    result = {"command": command_line("benchmarks.own_task", argv), "commit": commit_at_start(),
              "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"), "machine": cpu_model(),
              "quick": args.quick, **report(args.database)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(json.dumps(result["judge_minus_proxy"], indent=1))


if __name__ == "__main__":
    main()
