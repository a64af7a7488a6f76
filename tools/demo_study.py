"""A synthetic study, written with the tuner's own writers, for the read benchmark, tests and screenshots.

The curves are made up (no model is trained) but shaped like PPO runs under different settings: KL
grows faster with a higher learning rate, more epochs and a smaller β; an adaptive controller holds
KL near its target by moving β; the proxy score keeps rising with KL while the gold score peaks and
falls (over-optimisation); trials whose KL passes the guard's threshold are pruned, as the tuner
would. Trials, their attributes and intermediate values go through Optuna's storage API and the
metrics and samples through ``tuner.store.records.TrialStore``, so the database looks like a real study's.

It writes, so it lives outside the read-only ``dashboard`` package, which never imports it.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import optuna
import sqlalchemy
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from ppo_core.run.callbacks import SampleGeneration
from tuner.store.attrs import (
    BUDGET_ATTR,
    CONFIG_ATTR,
    DEFAULT_KL_METRIC,
    DEFAULT_KL_THRESHOLD,
    FAIL_REASON_ATTR,
    KL_GUARD_ATTR,
    KL_HISTORY_ATTR,
    NON_FINITE_ATTR,
    PRUNE_REASON_ATTR,
    PRUNED_AT_ATTR,
)
from tuner.store.database import create_engine, open_storage
from tuner.store.records import TrialStore, create_tables

EVAL_PROMPTS = (
    "Write a haiku about the sea.",
    "Explain why the sky is blue.",
    "Give one tip for learning Python.",
    "Summarise Hamlet in one sentence.",
)
ANSWERS = (
    "Grey waves fold and break, salt wind carries gull voices, the tide keeps its time.",
    "Air scatters short blue wavelengths of sunlight more than red ones, so blue reaches us from every side.",
    "Write a small program every day and read the errors slowly; they tell you what to learn next.",
    "A prince feigns madness to avenge his father's murder, and nearly everyone dies.",
)
# What a policy that games the proxy reward model drifts towards: flattery the RM likes, repeated.
HACK_PHRASES = ("Great question!", "Absolutely wonderful!", "I hope this helps!", "Truly amazing!")

DISTRIBUTIONS = {
    "learning_rate": FloatDistribution(1e-6, 1e-4, log=True),
    "kl_control": CategoricalDistribution(("fixed", "adaptive")),
    "kl_coef": FloatDistribution(0.01, 0.2, log=True),
    "kl_target": FloatDistribution(3.0, 10.0),
    "num_ppo_epochs": IntDistribution(1, 8),
    "cliprange": FloatDistribution(0.1, 0.3),
}


@dataclass(frozen=True)
class DemoSpec:
    """Size and shape of the synthetic study."""

    name: str = "synthetic-demo"
    n_trials: int = 24
    n_updates: int = 60
    episodes_per_update: int = 64
    sample_every: int = 10
    threshold: float = DEFAULT_KL_THRESHOLD
    seed: int = 0
    # One objective: the proxy score; two: the proxy score up and KL down (a Pareto front).
    objectives: tuple[str, ...] = ("objective/scores",)
    running_trials: int = 0  # the last trials are left RUNNING, half-way through, as if a worker were busy
    stop_trials: bool = True  # prune KL blow-ups and fail diverged runs; False runs every trial to the end
    # Given, trial n's config names estimators[n % len] as its advantage_estimator (the curves do not depend on it).
    estimators: tuple[str, ...] = ()
    gold_score: bool = True  # False: no gold scorer, as with a custom reward (no objective/gold_score, no sample gold)
    start: dt.datetime = field(default_factory=lambda: dt.datetime(2025, 1, 1, 9, 0, 0))


def _sample_params(rng: np.random.Generator) -> dict[str, Any]:
    params: dict[str, Any] = {
        "learning_rate": float(math.exp(rng.uniform(math.log(1e-6), math.log(1e-4)))),
        "kl_control": str(rng.choice(["fixed", "adaptive"])),
        "num_ppo_epochs": int(rng.integers(1, 9)),
        "cliprange": float(rng.uniform(0.1, 0.3)),
    }
    if params["kl_control"] == "fixed":
        params["kl_coef"] = float(math.exp(rng.uniform(math.log(0.01), math.log(0.2))))
    else:
        params["kl_target"] = float(rng.uniform(3.0, 10.0))
    return params


def _kl_and_beta(params: dict[str, Any], steps: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    drive = params["learning_rate"] / 1e-5 * params["num_ppo_epochs"] / 4
    noise = rng.normal(0.0, 0.04, len(steps))
    if params["kl_control"] == "fixed":
        beta = np.full(len(steps), params["kl_coef"])
        rate = 0.12 * drive / (params["kl_coef"] / 0.05) ** 0.7
        kl = rate * steps * (1 + 0.01 * drive * steps)
        return np.maximum(kl * (1 + noise), 0.0), beta
    target = params["kl_target"]
    rate = 0.2 * drive
    kl = target * (1 - np.exp(-rate * steps / target)) + 0.15 * target * np.sin(steps / 6) * np.exp(-steps / 30)
    kl = np.maximum(kl * (1 + noise), 0.0)
    # The adaptive controller raises β while KL is above the target and lowers it while below.
    error = np.clip((kl - target) / target, -0.2, 0.2)
    beta = 0.05 * np.exp(np.cumsum(error) * 0.1)
    return kl, beta


def _curves(params: dict[str, Any], n_updates: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    steps = np.arange(1, n_updates + 1, dtype=float)
    kl, beta = _kl_and_beta(params, steps, rng)
    drive = params["learning_rate"] / 1e-5 * params["num_ppo_epochs"] / 4

    def noisy(values: np.ndarray | float, scale: float) -> np.ndarray:
        return values + rng.normal(0.0, scale, n_updates)

    scores = noisy(0.2 + 2.0 * (1 - np.exp(-kl / 4)), 0.05)
    # A gold score lies in [0, 1], as the built-in task's does; it peaks near 7.9 nats.
    gold = noisy(0.2 + 0.6 * (1 - np.exp(-kl / 3)) - 0.006 * np.maximum(kl - 6, 0) ** 1.6, 0.04)
    entropy_per_token = noisy(2.4 * np.exp(-kl / 12), 0.02)
    # A too-fast value network (drive > 3) diverges exponentially, as an unstable critic does.
    runaway = 0.002 * np.exp(np.minimum(steps * 0.08 * drive, 700)) if drive > 3 else 0.0
    value_loss = 0.05 + 0.5 * np.exp(-steps / 15) + runaway
    lr_scale = 1 - (steps - 1) / n_updates
    response_length = noisy(40 - 10 * (1 - np.exp(-kl / 5)), 1.0)
    return {
        "objective/kl": kl,
        "objective/entropy": entropy_per_token * response_length,
        "objective/non_score_reward": -beta * kl,
        "objective/rlhf_reward": scores - beta * kl,
        "objective/scores": scores,
        "objective/scores_std": noisy(np.full(n_updates, 0.6), 0.03),
        "objective/response_length": response_length,
        "objective/gold_score": gold,
        "objective/kl_coef": beta,
        "policy/approxkl_avg": np.abs(noisy(0.004 * drive * np.ones(n_updates), 0.001)),
        "policy/clipfrac_avg": np.clip(noisy(0.03 + 0.04 * drive * (0.2 / params["cliprange"]), 0.01), 0, 1),
        "loss/policy_avg": noisy(np.zeros(n_updates), 0.02),
        "loss/value_avg": noisy(value_loss, 0.01),
        "val/clipfrac_avg": np.clip(noisy(np.full(n_updates, 0.05), 0.01), 0, 1),
        "policy/entropy_avg": entropy_per_token,
        "val/ratio": noisy(np.ones(n_updates), 0.005),
        "val/ratio_var": np.abs(noisy(np.full(n_updates, 0.001), 0.0003)),
        "val/num_eos_tokens": np.round(np.clip(noisy(np.full(n_updates, 50.0), 4), 0, 64)),
        "val/mean_value": noisy(scores * 0.8, 0.05),
        "val/explained_variance": np.clip(noisy(0.8 * (1 - np.exp(-steps / 10)), 0.05), -1, 1),
        "lr": params["learning_rate"] * lr_scale,
        "lr_value": params["learning_rate"] * lr_scale,
        "time/rollout_s": np.abs(noisy(np.full(n_updates, 1.2), 0.1)),
        "time/update_s": np.abs(noisy(np.full(n_updates, 0.4 * params["num_ppo_epochs"]), 0.05)),
        "time/tokens_per_s": np.abs(noisy(np.full(n_updates, 2500.0), 100)),
    }


def _response(prompt_index: int, kl: float, threshold: float, rng: np.random.Generator) -> str:
    # The further the policy has drifted, the more of the answer is replaced by reward-model bait.
    drift = min(kl / threshold, 1.0)
    words = ANSWERS[prompt_index % len(ANSWERS)].split()
    kept = words[: max(3, int(len(words) * (1 - 0.7 * drift)))]
    bait = [str(rng.choice(HACK_PHRASES)) for _ in range(round(drift * 4))]
    return " ".join([*kept, *bait])


def _samples(
    curves: dict[str, np.ndarray], updates: int, spec: DemoSpec, rng: np.random.Generator
) -> list[SampleGeneration]:
    sampled = sorted({0, *range(spec.sample_every, updates + 1, spec.sample_every), updates})
    samples = []
    for update in sampled:
        kl = float(curves["objective/kl"][update - 1]) if update else 0.0
        score = float(curves["objective/scores"][update - 1]) if update else 0.2
        gold = float(curves["objective/gold_score"][update - 1]) if update else 0.2
        for index, prompt in enumerate(EVAL_PROMPTS):
            noisy_gold = round(gold + float(rng.normal(0, 0.2)), 4)
            samples.append(SampleGeneration(
                update, update * spec.episodes_per_update, index, prompt, _response(index, kl, spec.threshold, rng),
                round(score + float(rng.normal(0, 0.2)), 4), noisy_gold if spec.gold_score else None,
            ))
    return samples


def _objective_values(curves: dict[str, np.ndarray], updates: int, objectives: tuple[str, ...]) -> list[float]:
    values = []
    for metric in objectives:
        history = curves[metric][:updates]
        # The tuner's default reductions: the mean of the last 5 updates, and KL's last value.
        values.append(float(history[-1]) if metric == "objective/kl" else float(history[-5:].mean()))
    return values


def _config(params: dict[str, Any], spec: DemoSpec) -> dict[str, Any]:
    return {
        "task": "synthetic", "learning_rate": params["learning_rate"], "value_learning_rate": None,
        "num_ppo_epochs": params["num_ppo_epochs"], "cliprange": params["cliprange"], "cliprange_value": 0.2,
        "vf_coef": 0.1, "entropy_coef": 0.0, "gamma": 1.0, "lam": 0.95,
        "kl_coef": params.get("kl_coef", 0.05), "kl_target": params.get("kl_target"), "kl_horizon": 10000,
        "per_device_train_batch_size": 8, "gradient_accumulation_steps": spec.episodes_per_update // 8,
        "num_mini_batches": 1, "total_episodes": spec.n_updates * spec.episodes_per_update,
        "response_length": 48, "temperature": 0.7, "seed": 42,
    }


def _fast_sqlite(engine: sqlalchemy.Engine) -> None:
    # A throwaway database: skipping fsync per commit makes 40,000 single-row commits take seconds, not minutes.
    @sqlalchemy.event.listens_for(engine, "connect")
    def _no_sync(connection: Any, _record: Any) -> None:
        connection.execute("PRAGMA synchronous=OFF")


def build_demo_study(url: str, spec: DemoSpec | None = None) -> None:
    """Write the synthetic study ``spec.name`` into the storage at ``url`` (created if missing)."""
    spec = spec or DemoSpec()
    storage = open_storage(url)
    directions: list[Literal["minimize", "maximize"]] = [
        "minimize" if m == "objective/kl" else "maximize" for m in spec.objectives
    ]
    study = optuna.create_study(study_name=spec.name, storage=storage, directions=directions)
    study.set_user_attr(KL_GUARD_ATTR, {"threshold": spec.threshold, "metric": DEFAULT_KL_METRIC})
    study_id = storage.get_study_id_from_name(spec.name)
    engine = create_engine(url)
    if engine.dialect.name == "sqlite":
        _fast_sqlite(engine)
    create_tables(engine)
    rng = np.random.default_rng(spec.seed)
    clock = spec.start
    for number in range(spec.n_trials):
        params = _sample_params(rng)
        curves = _curves(params, spec.n_updates, rng)
        running = number >= spec.n_trials - spec.running_trials
        trial, updates = _frozen_trial(params, curves, spec, clock, running)
        if spec.estimators:
            trial.user_attrs[CONFIG_ATTR]["advantage_estimator"] = spec.estimators[number % len(spec.estimators)]
        study.add_trial(trial)
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, number)
        store = TrialStore(engine, spec.name, trial_id, number)
        for update in range(1, updates + 1):
            row = {name: float(values[update - 1]) for name, values in curves.items()
                   if spec.gold_score or name != "objective/gold_score"}
            episode = float(update * spec.episodes_per_update)
            store.write_metrics(update, {**row, "update": float(update), "episode": episode})
        store.write_samples(_samples(curves, updates, spec, rng))
        clock = trial.datetime_complete or clock + dt.timedelta(seconds=2 * updates)
    engine.dispose()


def _frozen_trial(
    params: dict[str, Any], curves: dict[str, np.ndarray], spec: DemoSpec, start: dt.datetime, running: bool
) -> tuple[FrozenTrial, int]:
    """The Optuna trial as the tuner would have left it, and how many updates it ran."""
    kl, value_loss = curves["objective/kl"], curves["loss/value_avg"]
    crossed = np.nonzero(kl > spec.threshold)[0]
    diverged = np.nonzero(value_loss > 1e6)[0]
    never = spec.n_updates + 1
    first_crossed = int(crossed[0]) + 1 if len(crossed) and spec.stop_trials else never
    first_diverged = int(diverged[0]) + 1 if len(diverged) and spec.stop_trials else never
    updates = min(first_crossed, first_diverged, spec.n_updates)
    if running:
        updates = min(updates, spec.n_updates // 2)
    attrs: dict[str, Any] = {
        CONFIG_ATTR: _config(params, spec), BUDGET_ATTR: spec.n_updates,
        KL_HISTORY_ATTR: [round(float(v), 6) for v in kl[:updates]],
    }
    state, values = TrialState.COMPLETE, None
    if running:
        state = TrialState.RUNNING
    elif updates == first_diverged:
        # The value loss overflowed: the tuner fails such a trial at the first non-finite metric.
        value_loss[updates - 1] = math.inf
        state = TrialState.FAIL
        attrs[NON_FINITE_ATTR] = f"loss/value_avg is inf at update {updates}"
        attrs[FAIL_REASON_ATTR] = f"NonFiniteError: {attrs[NON_FINITE_ATTR]}"
    elif updates == first_crossed:
        state = TrialState.PRUNED
        attrs[PRUNE_REASON_ATTR] = (f"objective/kl {kl[updates - 1]:.2f} passed the threshold {spec.threshold:g} "
                                    f"at update {updates}")
        attrs[PRUNED_AT_ATTR] = updates
    else:
        values = _objective_values(curves, updates, spec.objectives)
    intermediate = {}
    if len(spec.objectives) == 1:
        history = curves[spec.objectives[0]]
        intermediate = {u: float(history[max(0, u - 5):u].mean()) for u in range(1, updates + 1)}
    finished = None if running else start + dt.timedelta(seconds=2 * updates)
    trial = FrozenTrial(
        number=0, trial_id=0, state=state, value=None, values=values, datetime_start=start,
        datetime_complete=finished, params=params, user_attrs=attrs, system_attrs={},
        intermediate_values=intermediate,
        distributions={name: DISTRIBUTIONS[name] for name in params},
    )
    return trial, updates
