"""Ctrl-C or SIGTERM at any moment of a worker's loop, not only while a trial's process runs: between Optuna storing
a trial as RUNNING and calling the objective, and between the objective returning and the trial's end being
stored. Whenever it lands, no trial is left RUNNING (a resume would wait for its heartbeat, then call it stale), the
trial it cut short is failed as interrupted and queued again, and the worker still ends as interrupted."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator, Sequence
from pathlib import Path

import optuna
import pytest
from helpers.studies import TESTS_DIR, write_study
from optuna.trial import FrozenTrial, TrialState

from ppo_core.errors import Terminated, sigterm_as_interrupt
from tuner.run.worker import open_study
from tuner.store.attrs import FAIL_REASON_ATTR
from tuner.store.database import create_engine
from tuner.store.records import create_tables
from tuner.study.study_file import load_study_spec
from tuner.trial.trial_function import INTERRUPTED, make_trial_function, run_trials

pytestmark = pytest.mark.heavy  # starts trial processes


@pytest.fixture(autouse=True)
def reward_functions_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(TESTS_DIR))


@pytest.fixture
def handlers_kept() -> Iterator[None]:
    """Ctrl-C raises, as in a worker started from a terminal (a pytest-xdist worker ignores it: its controller takes
    Ctrl-C); the test sets SIGTERM's handler as a worker's ``main`` does. The next test gets pytest's back."""
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    for signum, handler in previous.items():
        signal.signal(signum, handler)


class SignalledWhileAsked(optuna.samplers.RandomSampler):
    """The signal lands while Optuna asks for a trial: after the trial is stored RUNNING, before the objective runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(seed=0)
        self.signum = signum

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        super().before_trial(study, trial)
        os.kill(os.getpid(), self.signum)


class SignalledWhileTold(optuna.samplers.RandomSampler):
    """The signal lands while Optuna records how the trial ended: the objective has returned, the state is not yet
    stored."""

    def __init__(self, signum: int) -> None:
        super().__init__(seed=0)
        self.signum = signum

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        super().after_trial(study, trial, state, values)
        os.kill(os.getpid(), self.signum)


def _study(tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path,
           sampler: optuna.samplers.BaseSampler) -> tuple[optuna.Study, object]:
    spec = load_study_spec(write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=1))
    open_study(spec, heartbeat=False)
    create_tables(create_engine(spec.storage))  # as a worker does
    return optuna.load_study(study_name=spec.name, storage=spec.storage, sampler=sampler), spec


@pytest.mark.parametrize(("signum", "raised"), [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, Terminated)])
def test_a_signal_while_a_trial_is_asked_for_fails_it_as_interrupted_and_queues_it_again(
        tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, handlers_kept: None,
        signum: int, raised: type[BaseException]) -> None:
    sigterm_as_interrupt()
    study, spec = _study(tmp_path, tiny_lm_dir, prompts_file, SignalledWhileAsked(signum))
    with pytest.raises(raised):
        run_trials(study, make_trial_function(spec), n_trials=1)  # type: ignore[arg-type]
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.WAITING]
    assert trials[0].user_attrs[FAIL_REASON_ATTR] == INTERRUPTED
    # The handlers are the worker's own again: a later Ctrl-C raises at once.
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN


def test_a_signal_while_a_finished_trial_is_recorded_lets_the_record_finish_then_stops_the_worker(
        tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, handlers_kept: None) -> None:
    study, spec = _study(tmp_path, tiny_lm_dir, prompts_file, SignalledWhileTold(signal.SIGINT))
    ended: list[int] = []
    with pytest.raises(KeyboardInterrupt):
        run_trials(study, make_trial_function(spec), n_trials=3,  # type: ignore[arg-type]
                   callbacks=[lambda _, trial: ended.append(trial.number)])
    # The trial ran to its end and is stored so; the worker's callbacks saw it; no second trial was started.
    assert [t.state for t in study.get_trials()] == [TrialState.COMPLETE], study.get_trials()[0].user_attrs
    assert ended == [0]
