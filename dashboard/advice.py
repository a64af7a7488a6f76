"""What to try next, for a whole study: the trials' health findings, broken constraints and crowded range bounds,
counted over the study, each with the configuration pattern behind it, in the order the tuning guidance tunes.

The seed guidance ("PPO hyperparameters for LLMs", ../shared/seeds/ppo-hyperparameters-for-llms.txt) orders the
knobs: control KL first, then the learning rate and batch sizes, then the PPO epochs and clipping. The value
function and numerical trouble come after, and anything else last. :data:`GROUP_OF` places every health rule,
searched parameter and constrained metric in one of those groups; :data:`GROUPS` is their order.

A pattern compares the trials that show a sign with those that do not, one knob at a time: the best threshold
(or category) splits them, and the split counts only when it is wider than chance allows (see
:func:`separation_needed`). Example::

    advice = study_advice(view, findings, constraints)
    print("\\n".join(f"{item.what}. {item.evidence}. Try: {item.action}" for item in advice))
    # Proxy score up, gold score down (over-optimisation) in 6 of 30 trials. #1, #4, ...; all 6 had ...
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from dashboard.frontier_reading import unclear_words
from dashboard.health_rules import (
    ADVICE_ENTROPY,
    ADVICE_HACKING,
    ADVICE_KL_HIGH,
    ADVICE_KL_ZERO,
    ADVICE_NON_FINITE,
    ADVICE_OVER_OPTIMISATION,
    ADVICE_STEP_SIZE,
    ADVICE_VALUE,
    INFO,
    KL_GUIDANCE,
    SEVERITY_RANK,
    WARNING,
    Finding,
)
from dashboard.study_reader import PARAM_PREFIX, StudyView
from tuner.search.frontier_peak import kl_range
from tuner.search.peak_reading import PeakReading
from tuner.study.edge_findings import EdgeFinding
from tuner.study.inert_knobs import InertFinding

KL = "KL control"
LR_BATCH = "Learning rate and batch size"
EPOCHS_CLIP = "PPO epochs and clipping"
VALUE = "Value function"
NUMERICS = "Numerics"
OTHER = "Other"
GROUPS = (KL, LR_BATCH, EPOCHS_CLIP, VALUE, NUMERICS, OTHER)  # the guidance's order: KL first

# Every health rule (dashboard.health_rules), searched parameter and constrained metric, by the group it advises on.
GROUP_OF: dict[str, str] = {
    "kl_blow_up": KL, "kl_guard_trend": KL, "kl_high": KL, "kl_collapse": KL, "over_optimisation": KL,
    "judge_turned": KL, "hacking_signs": KL,
    "kl_coef": KL, "beta": KL, "kl_target": KL, "kl_control": KL, "kl_in_reward": KL, "kl_estimator": KL,
    "kl_loss_estimator": KL, "kl_horizon": KL, "objective/kl": KL, "eval/kl": KL,
    "entropy_collapse": LR_BATCH,
    "learning_rate": LR_BATCH, "lr_scheduler_type": LR_BATCH, "warmup_ratio": LR_BATCH, "warmup_steps": LR_BATCH,
    "rollout_batch_size": LR_BATCH, "mini_batch_size": LR_BATCH, "per_device_train_batch_size": LR_BATCH,
    "gradient_accumulation_steps": LR_BATCH, "num_mini_batches": LR_BATCH, "num_generations": LR_BATCH,
    "clipfrac_high": EPOCHS_CLIP, "approxkl_high": EPOCHS_CLIP,
    "num_ppo_epochs": EPOCHS_CLIP, "cliprange": EPOCHS_CLIP, "cliprange_low": EPOCHS_CLIP,
    "cliprange_high": EPOCHS_CLIP,
    "value_loss_diverging": VALUE,
    "value_learning_rate": VALUE, "vf_coef": VALUE, "cliprange_value": VALUE, "lam": VALUE, "gamma": VALUE,
    "non_finite": NUMERICS,
    "max_grad_norm": NUMERICS, "adam_epsilon": NUMERICS,
}

_KL_KNOBS = ("kl_coef", "beta", "kl_target", "kl_control", "learning_rate")
# Each rule's (and each constrained metric's) advice, and the knobs that advice names: a pattern is looked for in
# those knobs only, so the evidence speaks to the advice given.
ADVICE_OF: dict[str, tuple[tuple[str, ...], str]] = {
    "kl_blow_up": (_KL_KNOBS, ADVICE_KL_HIGH),
    "kl_guard_trend": (_KL_KNOBS, ADVICE_KL_HIGH),
    "kl_high": (_KL_KNOBS, ADVICE_KL_HIGH),
    "kl_collapse": (_KL_KNOBS, ADVICE_KL_ZERO),
    "over_optimisation": (("kl_coef", "beta", "kl_target", "kl_control"), ADVICE_OVER_OPTIMISATION),
    "judge_turned": (("kl_coef", "beta", "kl_target", "kl_control"), ADVICE_OVER_OPTIMISATION),
    "hacking_signs": (("kl_coef", "beta", "kl_target", "learning_rate"), ADVICE_HACKING),
    # A broken KL budget is KL too high.
    "objective/kl": (_KL_KNOBS, ADVICE_KL_HIGH),
    "eval/kl": (_KL_KNOBS, ADVICE_KL_HIGH),
    "entropy_collapse": (("learning_rate", "kl_coef", "beta", "entropy_coef"), ADVICE_ENTROPY),
    "clipfrac_high": (("num_ppo_epochs", "cliprange", "learning_rate"), ADVICE_STEP_SIZE),
    "approxkl_high": (("num_ppo_epochs", "cliprange", "learning_rate"), ADVICE_STEP_SIZE),
    "value_loss_diverging": (("value_learning_rate", "vf_coef", "cliprange_value"), ADVICE_VALUE),
    "non_finite": (("learning_rate", "value_learning_rate", "max_grad_norm"), ADVICE_NON_FINITE),
}
ADVICE_CONSTRAINT = "Optuna never counts an infeasible trial as best: search away from the settings that break it."

# The two-sample Kolmogorov-Smirnov statistic's critical value at the 5% level, c(0.05) = sqrt(-ln(0.025) / 2):
# a split of the trials is a pattern only when it separates them further than that (see separation_needed).
KS_CRITICAL = 1.358
GUARD_TREND_WORD = "trend"  # the KL guard's reason for a predicted crossing: "<metric> trend +<slope>/update ..."
MAX_PATTERNS = 2  # patterns named per item: the clearest, and a second if it is a pattern too
MAX_NAMED_TRIALS = 8  # trials named one by one in an item's evidence


@dataclass(frozen=True)
class Pattern:
    """How the trials showing a sign differ from the others in one knob: ``hits`` of the ``affected`` trials (those
    that used the knob) have ``knob relation bound``, against ``other_hits`` of the ``others``."""

    knob: str
    relation: str  # "≥", "≤" or "="
    bound: Any
    hits: int
    affected: int
    other_hits: int
    others: int

    @property
    def separation(self) -> float:
        """The share of the affected trials on the pattern's side minus the share of the others there."""
        return self.hits / self.affected - self.other_hits / self.others

    def text(self, affected_total: int) -> str:
        """E.g. ``all 6 had learning_rate ≥ 1.9e-05, against 2 of the 24 others``."""
        if self.hits == self.affected:
            who = {1: "the one", 2: "both"}.get(self.affected, f"all {self.affected}")
        else:
            who = f"{self.hits} of {self.affected}"
        used = "" if self.affected == affected_total else f" that used {self.knob}"
        bound = f"{self.bound:.3g}" if isinstance(self.bound, (int, float)) else str(self.bound)
        others = "none" if self.other_hits == 0 else f"{self.other_hits}"
        return (f"{who}{used} had {self.knob} {self.relation} {bound}, against {others} of the {self.others} "
                f"other{'s' if self.others != 1 else ''}{' that did' if used else ''}")


@dataclass(frozen=True)
class Advice:
    """One thing to try, with the evidence for it: ``what`` was seen, in how many trials and behind which settings."""

    group: str
    severity: str
    what: str
    evidence: str
    action: str
    count: int = 0  # trials that show it (0 for an edge of the search space)


def separation_needed(affected: int, others: int) -> float:
    """The smallest :attr:`Pattern.separation` that counts as a pattern: the two-sample KS critical value
    c(0.05) · sqrt((n + m) / (n · m)) for n affected and m other trials (above 1, i.e. never, for one affected trial
    among a few dozen: one trial is a count, not a pattern)."""
    return KS_CRITICAL * math.sqrt((affected + others) / (affected * others))


def knob_pattern(knob: str, values: pd.Series, affected: pd.Series) -> Pattern | None:
    """The split of ``values`` (one knob's value per trial, missing where a trial did not use it) that best separates
    the ``affected`` trials (a boolean per trial) from the others: a threshold for numbers, one value otherwise."""
    used = values.notna()
    values, hit = values[used], affected[used].to_numpy(dtype=bool)
    n_hit, n_other = int(hit.sum()), int((~hit).sum())
    if n_hit == 0 or n_other == 0 or values.nunique() < 2:
        return None
    if pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values):
        return _threshold(knob, values.to_numpy(dtype=float), hit, n_hit, n_other)
    labels = values.astype(str).to_numpy()
    best: Pattern | None = None
    for label in np.unique(labels):
        on = labels == label
        pattern = Pattern(knob, "=", label, int((on & hit).sum()), n_hit, int((on & ~hit).sum()), n_other)
        if best is None or pattern.separation > best.separation:
            best = pattern
    return best


def _threshold(knob: str, values: np.ndarray, hit: np.ndarray, n_hit: int, n_other: int) -> Pattern:
    order = np.argsort(values, kind="stable")
    v, h = values[order], hit[order]
    # Cutting after position i puts v[:i+1] below; only between distinct values.
    hits_below, others_below = np.cumsum(h)[:-1], np.cumsum(~h)[:-1]
    below = np.where(v[:-1] < v[1:], hits_below / n_hit - others_below / n_other, 0.0)
    cut = int(np.argmax(np.abs(below)))
    if below[cut] > 0:  # the affected trials lie low: name the highest of them as the bound
        bound = float(v[: cut + 1][h[: cut + 1]].max())
        on = values <= bound
        relation = "≤"
    else:
        bound = float(v[cut + 1:][h[cut + 1:]].min())
        on = values >= bound
        relation = "≥"
    return Pattern(knob, relation, bound, int((on & hit).sum()), n_hit, int((on & ~hit).sum()), n_other)


def clearest_patterns(knobs: pd.DataFrame, affected: pd.Series, names: Sequence[str]) -> list[Pattern]:
    """The patterns among ``names`` (columns of ``knobs``, one row per trial) that separate the affected trials from
    the others further than chance allows, clearest first (at most :data:`MAX_PATTERNS`)."""
    found = []
    for name in names:
        if name not in knobs.columns:
            continue
        pattern = knob_pattern(name, knobs[name], affected)
        if pattern is not None and pattern.separation >= separation_needed(pattern.affected, pattern.others):
            found.append(pattern)
    found.sort(key=lambda p: p.separation - separation_needed(p.affected, p.others), reverse=True)
    return found[:MAX_PATTERNS]


def knob_frame(view: StudyView) -> pd.DataFrame:
    """Each trial's knobs, indexed by trial number: the searched parameters as sampled (missing where a trial did not
    use one: kl_coef under the adaptive controller), and the other knobs the advice names from the trial's config."""
    trials = view.trials.set_index("number")
    searched = trials[[c for c in trials.columns if c.startswith(PARAM_PREFIX)]]
    frame = searched.rename(columns=lambda c: c.removeprefix(PARAM_PREFIX))
    if "kl_control" in trials.columns and "kl_control" not in frame.columns:
        frame = frame.assign(kl_control=trials["kl_control"].replace("", None))
    named = {knob for knobs, _ in ADVICE_OF.values() for knob in knobs} - set(frame.columns)
    configs = pd.DataFrame.from_dict(dict(view.configs), orient="index")
    from_config = configs[[c for c in configs.columns if c in named]] if not configs.empty else configs
    return frame.join(from_config, how="left") if not from_config.empty else frame


def varying(knobs: pd.DataFrame, names: Sequence[str]) -> list[str]:
    """The knobs among ``names`` that take more than one value in ``knobs``: the only ones a pattern can be in."""
    return [name for name in names if name in knobs.columns and knobs[name].nunique() > 1]


def _value(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _evidence(numbers: Sequence[int], knobs: pd.DataFrame, affected: pd.Series, names: Sequence[str],
              prefix: str = "") -> str:
    """The trials by number, then the patterns behind them; one trial is no pattern, so its own settings instead."""
    compared = varying(knobs, names)
    shown = ", ".join(f"#{n}" for n in numbers[:MAX_NAMED_TRIALS])
    shown += f" and {len(numbers) - MAX_NAMED_TRIALS} more" if len(numbers) > MAX_NAMED_TRIALS else ""
    if len(numbers) == 1:
        own = knobs.loc[numbers[0], compared].dropna() if compared else pd.Series(dtype=object)
        settings = ", ".join(f"{name} = {_value(value)}" for name, value in own.items())
        return prefix + shown + (f" with {settings}" if settings else "")
    patterns = clearest_patterns(knobs, affected, compared)
    if patterns:
        return "; ".join([prefix + shown, *(p.text(len(numbers)) for p in patterns)])
    if not compared:
        return prefix + shown
    return f"{prefix}{shown}; no clear pattern in {', '.join(compared)}"


def _evidence_among(numbers: Sequence[int], among: Sequence[int], knobs: pd.DataFrame, names: Sequence[str]) -> str:
    """:func:`_evidence` for ``numbers``, compared with the rest of the trials ``among``."""
    index = pd.Index(among)
    return _evidence(numbers, knobs.reindex(index), pd.Series(index.isin(numbers), index=index), names)


def finding_advice(findings: Mapping[int, Sequence[Finding]], ran: Sequence[int], knobs: pd.DataFrame) -> list[Advice]:
    """One item per health rule seen: the trials (of those that ``ran``) that show it, and the pattern behind it."""
    by_rule: dict[str, list[Finding]] = {}
    trials_of: dict[str, list[int]] = {}
    for number in ran:
        for finding in findings.get(number, ()):
            by_rule.setdefault(finding.rule, []).append(finding)
            trials_of.setdefault(finding.rule, []).append(number)
    items = []
    for rule, found in by_rule.items():
        numbers = sorted(set(trials_of[rule]))
        names, action = ADVICE_OF.get(rule, ((), found[0].advice))
        evidence = _evidence_among(numbers, ran, knobs, names)
        severity = min((f.severity for f in found), key=SEVERITY_RANK.__getitem__)
        items.append(Advice(GROUP_OF.get(rule, OTHER), severity,
                            f"{found[0].sign} in {len(numbers)} of {len(ran)} trials", evidence, action, len(numbers)))
    return items


def constraint_advice(constraints: Mapping[int, Mapping[str, float]], knobs: pd.DataFrame) -> list[Advice]:
    """One item per constraint that some trial broke (a value > 0, by Optuna's convention), among the trials that
    have it set."""
    frame = pd.DataFrame.from_dict(dict(constraints), orient="index") if constraints else pd.DataFrame()
    items = []
    for key in frame.columns:
        values = frame[key].dropna()
        broken = values > 0
        if not broken.any():
            continue
        # The key is tuner.study.constraints' "metric (reduce) <= bound"; its metric says what the constraint is about.
        metric = str(key).partition(" (")[0]
        names, action = ADVICE_OF.get(metric, (tuple(knobs.columns), ""))
        numbers = [int(n) for n in values.index[broken]]
        items.append(Advice(
            GROUP_OF.get(metric, OTHER), WARNING,
            f"Constraint {key} broken in {len(numbers)} of {len(values)} trials",
            _evidence(numbers, knobs.reindex(values.index), broken, names, prefix=f"by up to {values.max():.3g}: "),
            f"{ADVICE_CONSTRAINT} {action}".strip(), len(numbers),
        ))
    return items


def guard_advice(view: StudyView, knobs: pd.DataFrame) -> list[Advice]:
    """One item for the trials the KL guard stopped on its prediction: KL still under the threshold but its recent
    trend crossing it before the budget's end (tuner.trial.kl_guard.blowup_reason's "<metric> trend ..." reason). No
    health rule sees those (KL never passed the threshold), yet they are the study's KL running away."""
    trials = view.trials
    predicted = (trials["state"] == "PRUNED") & trials["reason"].astype(str).str.startswith(
        f"{view.kl_guard.metric} {GUARD_TREND_WORD} ")
    if not predicted.any():
        return []
    numbers = [int(n) for n in trials.loc[predicted, "number"]]
    names, action = ADVICE_OF["kl_guard_trend"]
    evidence = _evidence_among(numbers, view.numbers, knobs, names)
    what = (f"KL heading past the guard's {view.kl_guard.threshold:g} nats: {len(numbers)} of {len(view.numbers)} "
            "trials stopped on the trend")
    return [Advice(KL, WARNING, what, evidence, action, len(numbers))]


def edge_advice(findings: Sequence[EdgeFinding]) -> list[Advice]:
    """One item per searched range whose best trials crowd against a bound (tuner.study.edge_findings)."""
    return [Advice(GROUP_OF.get(f.param, OTHER), INFO,
                   f"The best trials crowd the {'upper' if f.bound == 'high' else 'lower'} bound of {f.param}",
                   f.message, f.advice[0].upper() + f.advice[1:] + ": the optimum may lie beyond it.")
            for f in findings]


def inert_advice(findings: Sequence[InertFinding]) -> list[Advice]:
    """One item per searched knob whose metric shows it never acted (tuner.study.inert_knobs)."""
    return [Advice(GROUP_OF.get(f.param, OTHER), WARNING, f"{f.param} did nothing in any trial",
                   f"{f.metric} was 0 in all {f.updates} updates of {f.trials} trials",
                   f"Drop {f.param} from the search space, or search num_ppo_epochs or num_mini_batches so that an "
                   "update takes more than one optimizer step per rollout.")
            for f in findings]


def peak_sentence(reading: PeakReading) -> str:
    """The study's own KL figure, where its evaluations show gold peaking: what replaces the guidance's generic one."""
    peak = reading.peak
    return (f"This study's gold score peaks at {peak.kl:.3g} nats of KL ({kl_range(peak.kl_low, peak.kl_high)} over "
            "resampled trials): keep KL near it.")


def peak_advice(reading: PeakReading | None) -> list[Advice]:
    """One item on where the study's gold peaks in KL (:class:`dashboard.frontier_reading.PeakReading`, as the Frontier
    page reads it): the KL to aim at where the data show a clear peak; where the curve's turn (or its rise or fall)
    stays within the runs' noise, that there is none, and no KL to aim at."""
    if reading is None:
        return []
    peak = reading.peak
    read_from = f"read from {peak.points} evaluations of {peak.trials} trials"
    if reading.status == "unclear":
        return [Advice(
            KL, INFO, "No clear peak of gold in KL",
            f"{read_from}: {unclear_words(reading)} (the Frontier page draws the curve)",
            "Choose the KL for other reasons (the proxy score wanted, a KL budget, the runs' cost): this study's gold "
            "does not single one out. More trials at the KLs in question would narrow the noise.",
        )]
    if not reading.found:
        return []
    return [Advice(
        KL, INFO, f"Gold peaks at {peak.kl:.3g} nats of KL",
        f"{read_from}: {kl_range(peak.kl_low, peak.kl_high)} nats over resampled trials, {peak.inside:.0%} of which "
        f"show the turn; {reading.clearance.numbers()} (the Frontier page draws it)",
        f"Aim kl_target (with the adaptive controller) near {peak.kl:.3g} nats, or keep the KL budget near "
        f"{peak.kl_high:.3g}: past the peak, more KL buys proxy score, not gold.",
    )]


def order(items: Sequence[Advice]) -> list[Advice]:
    """By group in the guidance's order, then worst first, then the most trials first."""
    return sorted(items, key=lambda a: (GROUPS.index(a.group), SEVERITY_RANK[a.severity], -a.count))


def study_advice(
    view: StudyView, findings: Mapping[int, Sequence[Finding]], constraints: Mapping[int, Mapping[str, float]],
    peak: PeakReading | None = None, inert: Sequence[InertFinding] = (),
) -> list[Advice]:
    """What to try next for the study: its health findings (trial number -> findings), its broken constraints
    (trial number -> constraint values, as ``FrozenTrial.constraints``), its edge findings, the searched knobs that
    never acted (``inert``) and, given where its
    gold peaks in KL (``peak``), that KL, ordered. Where the data show a clear peak, the advice on KL speaks of it
    instead of the guidance's generic 15–20 nats."""
    if view.trials.empty:
        return []
    knobs = knob_frame(view)
    ran = [n for n, updates in zip(view.numbers, view.trials["updates"], strict=True) if updates > 0 or findings.get(n)]
    items = (finding_advice(findings, ran, knobs) + guard_advice(view, knobs) + constraint_advice(constraints, knobs)
             + edge_advice(view.edge_findings) + inert_advice(inert) + peak_advice(peak))
    if peak is not None and peak.found:
        items = [replace(item, action=item.action.replace(KL_GUIDANCE, peak_sentence(peak))) for item in items]
    return order(items)
