"""What tuning the proxy costs a study that has no judge: the regret, in held-out gold, of choosing its winner by the
proxy (``eval/score``, the user's own reward on held-out prompts) within the KL budget, against choosing it by gold
(``eval/gold_score``), measured on the built-in tasks, where gold exists.

Curve tables (``results/curve_tables``, every configuration run on every table seed): a study of ``n``
configurations (the shipped study's size: 12 for the text task, ``studies/text.yaml``; 30 for the graph task,
``studies/quickstart.yaml``) is drawn from a table, and one table seed is held out. Both pickers see the other seeds
only: each configuration's proxy and gold reduced as the study reduces its objective (the mean of the last 2
evaluations) and averaged over those seeds, feasible when the mean of its reduced ``eval/kl`` keeps the table's
budget. Both picks are then scored by their gold on the held-out seed, so the luck a pick had on the seeds it was
picked on does not count:

    regret = gold_held_out(gold's pick) - gold_held_out(proxy's pick)

negative when gold's pick falls back on the held-out seed and the proxy's does not. A draw averages over every
choice of held-out seed. A table's figure is the mean over draws, its 95% interval a percentile bootstrap over the
table's configurations (resampled with replacement, the draws repeated on each resample); a task's figure weighs its
tables alike, the interval from the same resamples.

Stored studies (``results/real_model_study/*/study.db``, read from a copy): each configuration the study completed,
its runs' means (one to three seeds each), in sample: there is no held-out seed for the proxy's pick. Besides or
instead of the KL budget, the proxy's pick may have to keep hacking signals (``SIGNALS``): the dashboard's entropy
rule, fixed in advance; the held-out answers' length against the limit and their word n-grams against the untuned
policy's (``ppo_core.run.hacking_signals``), with thresholds chosen on the studies of the other task versions, never
on the study they are scored on.

    python -m benchmarks.proxy_regret                 # writes results/proxy_regret/proxy_regret.json
    python -m benchmarks.proxy_regret --quick --out /tmp/proxy_regret.json
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import itertools
import json
import math
import shutil
import statistics
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pandas as pd

from benchmarks.common.json_safe import json_safe
from benchmarks.common.machine import cpu_model
from benchmarks.ranking_replay import PAIRS
from benchmarks.replay.table import constraint_reduced, load_table, run_value
from dashboard.health_rules import HealthContext, entropy_collapse
from ppo_core.metric_names import (
    EVAL_DISTINCT_2,
    EVAL_GOLD_SCORE,
    EVAL_KL,
    EVAL_REPEATED_3,
    EVAL_RESPONSE_LENGTH,
    EVAL_SCORE,
)
from ppo_core.run.hacking_signals import text_signals
from tools.provenance import command_line, commit_at_start
from tools.quick_mode import RESULTS, ROOT, add_quick_argument, results_path
from tuner.store.database import open_read_only_engine, open_read_only_storage
from tuner.store.records import read_metrics, read_samples
from tuner.study.constraints import Constraint
from tuner.study.reduction import Reduction, reduce_history
from tuner.study.spec import Objective, StudySpec
from tuner.study.study_file import load_study_spec

OUT = RESULTS / "proxy_regret" / "proxy_regret.json"
PAGE = "benchmarks/results/proxy_regret/README.md"
TABLES = RESULTS / "curve_tables"
STUDIES = RESULTS / "real_model_study"
TASKS: dict[str, tuple[str, tuple[str, ...]]] = {
    "text": ("studies/text.yaml", ("curve_table_text.jsonl", "curve_table_smollm2_v3.jsonl",
                                   "curve_table_smollm2_v5.jsonl", "curve_table_smollm2_v6.jsonl",
                                   "curve_table_smollm2_v7.jsonl")),
    "graph": ("studies/quickstart.yaml", ("curve_table.jsonl", "curve_table_task1.jsonl", "curve_table_task2.jsonl",
                                          "curve_table_task3.jsonl")),
}
"""Each built-in task: its shipped study (a drawn study has its n_trials) and its curve tables."""
DRAWS = 10_000
"""Studies drawn from a table for its figure."""
BOOTSTRAPS = 1_000
BOOTSTRAP_DRAWS = 1_000
"""Studies drawn from each bootstrap resample of a table."""
QUICK = {"draws": 40, "bootstraps": 10, "bootstrap_draws": 20}
QUICK_TABLES = ("curve_table_smollm2_v7.jsonl", "curve_table_task3.jsonl")
QUICK_STUDIES = ("real_model_study_v6", "real_model_study_v7_frontier")
"""A quick run: one table of each task, and two studies of different task versions (each is the other's to choose
thresholds on)."""
OUTCOMES = ("regret", "same", "regret_in_sample", "regret_without_budget", "gain")
"""Per drawn study: the regret on the held-out seed; whether the two picks are one configuration; the regret on the
seeds the picks were made on; the regret of the proxy's pick with no KL budget at all (against gold's within it);
and what gold's pick gains on the held-out seed over the mean of the study's feasible configurations."""


@dataclasses.dataclass(frozen=True)
class Scores:
    """One curve table as a study reads it: per configuration (rows) and table seed (columns) the run's proxy and
    gold, each reduced as the study reduces its objective, and its KL, reduced as its budget is."""

    proxy: np.ndarray
    gold: np.ndarray
    kl: np.ndarray
    budget: float
    """Nats: the most the reduced KL, averaged over the seeds a picker sees, may be."""

    def rows(self, configs: np.ndarray) -> Scores:
        return Scores(self.proxy[configs], self.gold[configs], self.kl[configs], self.budget)


def kl_budget(spec: StudySpec, fallback: tuple[Constraint, float] | None = None) -> tuple[Constraint, float]:
    """The study's KL budget, its constraint that bounds ``eval/kl`` from above, and that bound; ``fallback`` for a
    study with none (a frontier study)."""
    for constraint in spec.constraints:
        if constraint.metric == EVAL_KL and constraint.max is not None:
            return constraint, constraint.max
    if fallback is None:
        raise SystemExit(f"{spec.name}: no KL budget (a constraint on {EVAL_KL} with a max)")
    return fallback


def table_scores(path: Path, spec: StudySpec) -> Scores:
    """The table at ``path`` read with the objective and KL budget of the study it was drawn from; a configuration
    with a run that never reported the objective (it diverged first) is left out."""
    objective, (budget, nats) = spec.objectives[0], kl_budget(spec)
    proxy_objective = dataclasses.replace(objective, metric=EVAL_SCORE)
    table = load_table(path, objective, [budget])
    configs = [config for config in table.configs.values() if not math.isnan(config.true_value)]

    def grid(value: Callable[[Any], float]) -> np.ndarray:
        return np.array([[value(config.runs[seed]) for seed in table.seeds] for config in configs])

    scores = Scores(grid(lambda run: run_value(run, proxy_objective)), grid(lambda run: run_value(run, objective)),
                    grid(lambda run: constraint_reduced(run, budget)), nats)
    if scores.gold.shape[1] < 2:
        raise SystemExit(f"{path.name}: one seed per configuration, none to hold out")
    return scores


def best(values: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """Per row, the column of the highest value among the allowed ones (0 in a row that allows none)."""
    return np.where(allowed, values, -np.inf).argmax(axis=1)


def outcomes(scores: Scores, draws: np.ndarray) -> dict[str, np.ndarray]:
    """Each ``OUTCOMES`` figure of each drawn study (a row of configuration indices), averaged over the choice of
    held-out seed; NaN for a study with no feasible configuration."""
    seeds, rows = scores.gold.shape[1], np.arange(len(draws))
    totals = {key: np.zeros(len(draws)) for key in OUTCOMES}
    for held in range(seeds):
        seen = [seed for seed in range(seeds) if seed != held]
        proxy, gold, kl = (values[:, seen].mean(axis=1)[draws] for values in (scores.proxy, scores.gold, scores.kl))
        fresh = scores.gold[:, held][draws]
        feasible = kl <= scores.budget
        by_proxy, by_gold = best(proxy, feasible), best(gold, feasible)
        unbudgeted = best(proxy, np.ones_like(feasible))
        gold_pick = fresh[rows, by_gold]
        totals["regret"] += gold_pick - fresh[rows, by_proxy]
        totals["same"] += by_proxy == by_gold
        totals["regret_in_sample"] += gold[rows, by_gold] - gold[rows, by_proxy]
        totals["regret_without_budget"] += gold_pick - fresh[rows, unbudgeted]
        with np.errstate(invalid="ignore"):
            totals["gain"] += gold_pick - np.where(feasible, fresh, 0.0).sum(axis=1) / feasible.sum(axis=1)
        for key in OUTCOMES:
            totals[key][~feasible.any(axis=1)] = np.nan
    return {key: total / seeds for key, total in totals.items()}


def sample_draws(rng: np.random.Generator, configs: int, size: int, draws: int) -> np.ndarray:
    """``draws`` studies of ``size`` distinct configurations of ``configs``."""
    return rng.random((draws, configs)).argsort(axis=1)[:, :size]


def means(found: dict[str, np.ndarray]) -> dict[str, float]:
    return {key: float(np.nanmean(values)) for key, values in found.items()}


def interval(point: float, replicates: np.ndarray) -> dict[str, float]:
    low, high = np.nanpercentile(replicates, [2.5, 97.5])
    return {"mean": point, "ci_low": float(low), "ci_high": float(high)}


def figures(point: dict[str, float], replicates: dict[str, np.ndarray]) -> dict[str, Any]:
    """Each outcome's mean with its bootstrap interval, and the share of gold's gain that the proxy's pick loses."""
    found: dict[str, Any] = {key: interval(point[key], replicates[key]) for key in OUTCOMES}
    with np.errstate(invalid="ignore", divide="ignore"):
        found["share_of_gain_lost"] = interval(point["regret"] / point["gain"],
                                               replicates["regret"] / replicates["gain"])
    return found


def measure_table(scores: Scores, size: int, settings: dict[str, int],
                  rng: np.random.Generator) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """A table's figures (with the spread of one study's regret) and the bootstrap replicates behind them."""
    configs = len(scores.gold)
    size = min(size, configs)
    drawn = outcomes(scores, sample_draws(rng, configs, size, settings["draws"]))
    replicates: dict[str, list[float]] = {key: [] for key in OUTCOMES}
    for _ in range(settings["bootstraps"]):
        resampled = scores.rows(rng.integers(configs, size=configs))
        found = means(outcomes(resampled, sample_draws(rng, configs, size, settings["bootstrap_draws"])))
        for key, value in found.items():
            replicates[key].append(value)
    arrays = {key: np.array(values) for key, values in replicates.items()}
    low, high = np.nanpercentile(drawn["regret"], [2.5, 97.5])
    return {"configs": configs, "seeds": scores.gold.shape[1], "study_size": size, "budget": scores.budget,
            "feasible_on_every_seed": int((scores.kl.mean(axis=1) <= scores.budget).sum()),
            "no_feasible_draws": int(np.isnan(drawn["regret"]).sum()), **figures(means(drawn), arrays),
            "one_study_regret_95_range": [float(low), float(high)]}, arrays


def measure_tables(names: Sequence[str], size_of: dict[str, int], settings: dict[str, int],
                   seed: int) -> tuple[dict[str, Any], dict[str, dict[str, np.ndarray]]]:
    tables, replicates = {}, {}
    for index, name in enumerate(names):
        scores = table_scores(TABLES / name, load_study_spec(ROOT / "benchmarks" / PAIRS[name]))
        task = next(task for task, (_, members) in TASKS.items() if name in members)
        found, replicates[name] = measure_table(scores, size_of[task], settings, np.random.default_rng(seed + index))
        tables[name] = {"task": task, **found}
        regret = found["regret"]
        print(f"{name}: regret {regret['mean']:+.4f} [{regret['ci_low']:+.4f}, {regret['ci_high']:+.4f}], "
              f"same pick {found['same']['mean']:.0%}", flush=True)
    return tables, replicates


def pooled(tables: dict[str, Any], replicates: dict[str, dict[str, np.ndarray]]) -> dict[str, Any]:
    """Each task's figures: its tables weighed alike, bootstrap replicate by replicate."""
    tasks = {}
    for task in TASKS:
        names = [name for name, found in tables.items() if found["task"] == task]
        if names:
            point = {key: float(np.mean([tables[name][key]["mean"] for name in names])) for key in OUTCOMES}
            stacked = {key: np.mean([replicates[name][key] for name in names], axis=0) for key in OUTCOMES}
            tasks[task] = {"tables": names, "study_size": tables[names[0]]["study_size"], **figures(point, stacked)}
    return tasks


# ------------------------------------------------------------------------------------------------ stored studies


@dataclasses.dataclass(frozen=True)
class Signal:
    """A hacking signal as a constraint on the proxy's pick: a configuration keeps it when its value (its runs'
    mean) is at least (``bound`` "min") or at most ("max") the threshold; one with no value keeps it."""

    bound: str
    thresholds: tuple[float | None, ...]
    """The candidates, loosest first (None: no bound): one alone is fixed in advance; of several, the one with the
    least regret on the other task versions' studies is used."""
    reads: str


SIGNALS = {
    "entropy_collapsed": Signal("max", (0.0,), "the share of the configuration's runs the dashboard's Health rule "
                                "flags (dashboard/health_rules.py: entropy over the last 5 updates under 0.2 of the "
                                "first 5's); one flagged run drops the configuration"),
    "length_share": Signal("max", (None, 0.995, 0.99, 0.98, 0.97), "the held-out answers' mean length over the "
                           "objective's evaluations, as a share of response_length"),
    "distinct_2grams_kept": Signal("min", (None, 0.5, 0.6, 0.7, 0.8, 0.9), "distinct word pairs of the final "
                                   "held-out answers, as a share of the untuned policy's on the same prompts"),
    "repeated_3grams_added": Signal("max", (None, 0.3, 0.2, 0.1, 0.05), "the share of repeated word triples in the "
                                    "final held-out answers, minus the untuned policy's"),
}
ARMS = {"budget": (True, False), "budget_and_signals": (True, True), "signals": (False, True), "none": (False, False)}
"""How the proxy chooses under each arm: (within the KL budget, keeping the signals). Gold's pick is always the best
gold within the KL budget: the study as it runs with a judge."""


@dataclasses.dataclass(frozen=True)
class StudyConfig:
    """One configuration a stored study completed: its runs' mean proxy, gold and KL (reduced as the study reduces
    its objective and its budget) and hacking signals."""

    trial: int
    """The number of its first trial."""
    runs: int
    proxy: float
    gold: float
    kl: float
    signals: dict[str, float]


def ngram_signals(final: list[str], untuned: list[str]) -> dict[str, float]:
    """A run's final held-out answers against the untuned policy's on the same prompts. The store keeps no stop
    flags, so the module's share at the length limit is not read."""
    after, before = (text_signals(texts, [False] * len(texts)) for texts in (final, untuned))
    kept = after[EVAL_DISTINCT_2] / before[EVAL_DISTINCT_2] if before[EVAL_DISTINCT_2] else math.nan
    return {"distinct_2grams_kept": kept, "repeated_3grams_added": after[EVAL_REPEATED_3] - before[EVAL_REPEATED_3]}


def run_signals(metrics: pd.DataFrame, samples: pd.DataFrame, objective: Objective, limit: int) -> dict[str, float]:
    lengths = metrics[EVAL_RESPONSE_LENGTH].dropna().tolist() if EVAL_RESPONSE_LENGTH in metrics else []
    found = {"entropy_collapsed": float(entropy_collapse(metrics, HealthContext()) is not None),
             "length_share": reduce_history(lengths, objective) / limit}
    last = int(samples["update"].max()) if len(samples) else 0
    if not last:
        return found
    final, untuned = (samples.loc[samples["update"] == update, "response"].tolist() for update in (last, 0))
    return found | ngram_signals(final, untuned)


def read_study(directory: Path, spec: StudySpec) -> tuple[list[optuna.trial.FrozenTrial], pd.DataFrame, pd.DataFrame]:
    """The study's trials, metrics and samples, from a copy of its database (the stored one is never opened)."""
    with tempfile.TemporaryDirectory(prefix="proxy-regret-") as scratch:
        for part in directory.glob("study.db*"):
            shutil.copy(part, scratch)
        url = f"sqlite:///{Path(scratch) / 'study.db'}"
        trials = optuna.load_study(study_name=spec.name, storage=open_read_only_storage(url)).trials
        engine = open_read_only_engine(url)
        metrics, samples = read_metrics(engine, spec.name), read_samples(engine, spec.name)
        engine.dispose()
    return trials, metrics, samples


def study_configs(directory: Path, spec: StudySpec, budget: Constraint) -> list[StudyConfig]:
    """The configurations the study completed: each trial with its races on other seeds."""
    trials, metrics, samples = read_study(directory, spec)
    objective = spec.objectives[0]
    reductions: dict[str, tuple[str, Reduction]] = {
        "proxy": (EVAL_SCORE, dataclasses.replace(objective, metric=EVAL_SCORE)), "gold": (EVAL_GOLD_SCORE, objective),
        "kl": (EVAL_KL, budget)}
    runs: dict[int, list[dict[str, Any]]] = {}
    for trial in trials:
        if trial.state != optuna.trial.TrialState.COMPLETE:
            continue  # no candidate: the KL guard stopped it, or a pruner
        own = metrics[metrics["trial_number"] == trial.number]
        evaluated = own.dropna(subset=[EVAL_SCORE])
        run: dict[str, Any] = {key: reduce_history(evaluated[metric].tolist(), reduction)
                               for key, (metric, reduction) in reductions.items()}
        run["signals"] = run_signals(own, samples[samples["trial_number"] == trial.number], objective,
                                     int(spec.base["response_length"]))
        runs.setdefault(int(trial.user_attrs.get("race_of", trial.number)), []).append(run)

    def mean(found: list[dict[str, Any]], key: str) -> float:
        return statistics.fmean(run[key] for run in found)

    return [StudyConfig(number, len(found), mean(found, "proxy"), mean(found, "gold"), mean(found, "kl"),
                        {name: statistics.fmean(run["signals"][name] for run in found) for name in found[0]["signals"]})
            for number, found in sorted(runs.items())]


def keeps_signals(config: StudyConfig, thresholds: Mapping[str, float | None]) -> bool:
    for name, threshold in thresholds.items():
        value = config.signals.get(name, math.nan)
        if threshold is not None and not math.isnan(value) and \
                ((value < threshold) if SIGNALS[name].bound == "min" else (value > threshold)):
            return False
    return True


def allowed(configs: Sequence[StudyConfig], budget: float, thresholds: Mapping[str, float | None],
            arm: str) -> list[StudyConfig]:
    within, signals = ARMS[arm]
    return [config for config in configs if (not within or config.kl <= budget)
            and (not signals or keeps_signals(config, thresholds))]


def study_regret(configs: Sequence[StudyConfig], budget: float, thresholds: Mapping[str, float | None],
                 arm: str) -> dict[str, Any]:
    """Gold's pick within the budget against the proxy's under ``arm``, in sample: regret = gold(gold's pick) -
    gold(proxy's pick), and against the best gold of any configuration; NaN when none keeps the arm's constraints."""
    by_gold = max(allowed(configs, budget, {}, "budget"), key=lambda config: config.gold)
    candidates = allowed(configs, budget, thresholds, arm)
    if not candidates:
        return {"proxy_pick": None, "gold_pick": by_gold.trial, "same": False, "regret": math.nan,
                "regret_against_best_anywhere": math.nan}
    by_proxy = max(candidates, key=lambda config: config.proxy)
    return {"proxy_pick": by_proxy.trial, "gold_pick": by_gold.trial, "same": by_proxy is by_gold,
            "regret": by_gold.gold - by_proxy.gold,
            "regret_against_best_anywhere": max(config.gold for config in configs) - by_proxy.gold,
            "proxy_pick_kl": by_proxy.kl, "candidates": len(candidates)}


def choose_thresholds(others: Sequence[tuple[float, Sequence[StudyConfig]]], arm: str) -> dict[str, float | None]:
    """The signals' thresholds with the least mean regret under ``arm`` over ``others`` (studies of other task
    versions, as (budget, configurations)), the loosest among equals; the loosest of all with none to choose on."""
    if not ARMS[arm][1]:
        return {}
    present = [name for name in SIGNALS
               if others and all(name in config.signals for _, configs in others for config in configs)]
    choices = [dict(zip(present, combination, strict=True))
               for combination in itertools.product(*(SIGNALS[name].thresholds for name in present))]

    def mean_regret(thresholds: dict[str, float | None]) -> float:
        found = [study_regret(configs, budget, thresholds, arm)["regret"] for budget, configs in others]
        return math.inf if any(math.isnan(value) for value in found) else statistics.fmean(found)

    return min(choices, key=mean_regret)  # the first of equals: the loosest, by the grids' order


def measure_studies(names: Sequence[str], fallback: tuple[Constraint, float]) -> dict[str, Any]:
    """Each stored study's picks under each arm, the signals' thresholds chosen on the other task versions'
    studies; a study with no KL budget of its own (a frontier study) is held to ``fallback``."""
    read: dict[str, tuple[str, float, list[StudyConfig]]] = {}
    for name in names:
        spec = load_study_spec(STUDIES / name / "study.yaml")
        constraint, nats = kl_budget(spec, fallback)
        read[name] = (str(spec.base["task"]), nats, study_configs(STUDIES / name, spec, constraint))
    found = {}
    for name, (task, budget, configs) in read.items():
        others = {other: (b, c) for other, (t, b, c) in read.items() if t != task}
        arms = {arm: {**study_regret(configs, budget, thresholds, arm), "thresholds": thresholds}
                for arm in ARMS for thresholds in [choose_thresholds(list(others.values()), arm)]}
        found[name] = {"task": task, "budget": budget, "configs": len(configs),
                       "within_budget": len(allowed(configs, budget, {}, "budget")), "chosen_on": sorted(others),
                       "arms": arms, "by_config": [dataclasses.asdict(config) for config in configs]}
        print(f"{name}: " + ", ".join(f"{arm} {value['regret']:+.3f}" for arm, value in arms.items()), flush=True)
    return found


def studies_overview(studies: dict[str, Any]) -> dict[str, Any]:
    """Per arm, over the stored studies: how many chose gold's pick, and the range of the regret. No interval: each
    study is one in-sample reading, and several share their first trials (one sampler seed)."""
    found = {}
    for arm in ARMS:
        read = [study["arms"][arm] for study in studies.values()]
        found[arm] = {"studies": len(read), "same_pick": sum(one["same"] for one in read)} | {
            f"{key}_{end}": extreme(one[key] for one in read) for key in ("regret", "regret_against_best_anywhere")
            for end, extreme in (("min", min), ("max", max))}
    return found


def summary(tasks: dict[str, Any]) -> dict[str, Any]:
    """The figures a study with no judge is shown, and the sentence that shows them."""
    found: dict[str, Any] = {
        task: {key: tasks[task]["regret"][key] for key in ("mean", "ci_low", "ci_high")}
        | {"same_pick": tasks[task]["same"], "gold_gain": tasks[task]["gain"], "study_size": tasks[task]["study_size"],
           "tables": tasks[task]["tables"]}
        for task in ("text", "graph") if task in tasks}
    found["sentence"] = sentence(found)
    found["page"] = PAGE
    return found


def sentence(found: dict[str, Any]) -> str:
    """"Tuning the proxy within a KL budget cost X [lo, hi] gold on the text task and Y [lo, hi] on the graph task,
    against tuning gold; see PAGE.", from the summary's figures."""
    parts = [f"{found[task]['mean']:.3f} [{found[task]['ci_low']:.3f}, {found[task]['ci_high']:.3f}]"
             f"{' gold' if index == 0 else ''} on the {task} task"
             for index, task in enumerate(task for task in ("text", "graph") if task in found)]
    return f"Tuning the proxy within a KL budget cost {' and '.join(parts)}, against tuning gold; see {PAGE}."


def main(argv: Sequence[str] | None = None) -> None:
    every_table = [name for _, names in TASKS.values() for name in names]
    parser = argparse.ArgumentParser(prog="python -m benchmarks.proxy_regret", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", nargs="+", default=every_table, choices=every_table)
    parser.add_argument("--studies", nargs="+", default=sorted(p.parent.name for p in STUDIES.glob("*/study.db")),
                        help="folders under benchmarks/results/real_model_study/ with a study.db and its study.yaml")
    parser.add_argument("--configs", type=int, default=None,
                        help="configurations per drawn study (default: each task's shipped study's n_trials)")
    parser.add_argument("--draws", type=int, default=DRAWS)
    parser.add_argument("--bootstraps", type=int, default=BOOTSTRAPS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None)
    add_quick_argument(parser)
    args = parser.parse_args(argv)
    if min(args.draws, args.bootstraps, 1 if args.configs is None else args.configs) < 1:
        parser.error("--draws, --bootstraps and --configs must be at least 1")
    settings = {"draws": args.draws, "bootstraps": args.bootstraps, "bootstrap_draws": BOOTSTRAP_DRAWS}
    tables, studies = args.tables, args.studies
    if args.quick:
        settings, tables, studies = dict(QUICK), list(QUICK_TABLES), list(QUICK_STUDIES)
    size_of = {task: args.configs or int(load_study_spec(ROOT / study).n_trials or 0)
               for task, (study, _) in TASKS.items()}
    out = results_path(args.out, OUT, args.quick)
    by_table, replicates = measure_tables(tables, size_of, settings, args.seed)
    tasks = pooled(by_table, replicates)
    by_study = measure_studies(studies, kl_budget(load_study_spec(ROOT / TASKS["text"][0])))
    result = {"command": command_line("benchmarks.proxy_regret", argv), "commit": commit_at_start(),
              "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"), "machine": cpu_model(),
              "quick": args.quick, "settings": {**settings, "seed": args.seed}, "summary": summary(tasks),
              "tasks": tasks, "tables": by_table, "studies_overview": studies_overview(by_study),
              "signals": {name: dataclasses.asdict(signal) for name, signal in SIGNALS.items()}, "studies": by_study}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(json_safe(result), indent=1) + "\n")
    print(result["summary"]["sentence"])
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
