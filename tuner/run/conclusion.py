"""What a finished run of a study says, and the exit status it ends with."""

from __future__ import annotations

from collections import Counter

import optuna
from optuna.trial import FrozenTrial, TrialState
from rich.console import Console

from tuner.population.controller import EXTINCT
from tuner.population.lineage import population_line
from tuner.run.failure_streak import SAME_FAILURES_TO_STOP, failure_streak
from tuner.run.savings import update_savings
from tuner.store.database import create_engine
from tuner.store.records import read_stored_metrics
from tuner.study.edge_findings import edge_findings, format_edge_findings
from tuner.study.inert_knobs import format_inert_findings, inert_findings
from tuner.study.reports import trial_reason, trials_frame
from tuner.study.spec import StudySpec
from tuner.trial.launch import describe_exit


def conclude(study: optuna.Study, spec: StudySpec, validation: bool, returncodes: list[int],
             console: Console) -> int:
    """The end of a run whose workers all ended without a signal: each failed worker named, what the finished
    search says (the searched ranges whose best trials crowd a bound, and what pruning and the KL guard saved; a
    validation runs every run to the end, so nothing; and a searched knob whose metric shows it never acted), then why
    it failed if it did; its exit status."""
    trials = study.get_trials(deepcopy=False)
    failed_workers = [(index, code) for index, code in enumerate(returncodes) if code not in (0, 130, 143)]
    status, why = _exit_status(trials, bool(failed_workers), validation)
    for index, code in failed_workers:
        console.print(f"worker {index} was {describe_exit(code)}" if code < 0
                      else f"worker {index} ended with {describe_exit(code)}", soft_wrap=True)
    findings = format_edge_findings(edge_findings(trials, spec.search_space, study.directions))
    inert = None if validation else format_inert_findings(inert_findings(
        read_stored_metrics(create_engine(spec.storage), spec.name), spec.search_space))
    # A population's segments are not runs stopped early: what it did is said in its own words.
    savings = None if validation or spec.population is not None else update_savings(trials_frame(study))
    population = None if spec.population is None else \
        population_line(trials, spec.population.size, study.user_attrs.get(EXTINCT))
    for line in (population, findings, inert, savings.line() if savings is not None else None, why):
        if line:
            console.print(line, soft_wrap=True, markup=False)
    return status


def _exit_status(trials: list[FrozenTrial], failed_workers: bool, validation: bool) -> tuple[int, str | None]:
    """1 when the study stopped on a run of identical failures (not in a validation, where a configuration failing
    on every seed is a result), when no trial completed, or when a worker failed; else 0. With the first two, why,
    in one line whatever the terminal's width: it is what a user (or a script) greps for."""
    completed = any(trial.state == TrialState.COMPLETE for trial in trials)
    streak = None if validation else failure_streak(trials)
    if streak is not None:
        return 1, (("" if completed else "no trial completed; ")
                   + f"stopped after {SAME_FAILURES_TO_STOP} trials in a row failed with: {streak}")
    if not completed:
        reasons = Counter(trial_reason(trial) or "no reason recorded" for trial in trials
                          if trial.state == TrialState.FAIL)
        common = reasons.most_common(1)
        return 1, "no trial completed" + (f"; {common[0][1]} failed with: {common[0][0]}" if common else "")
    return (1 if failed_workers else 0), None
