"""Racing on seeds (tuner.study.seed_policy): leading configurations re-run on further seeds during the study, and the
winner chosen on its mean shrunk by the seed noise, so no single seed's luck picks it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
from helpers.studies import write_study
from optuna.distributions import FloatDistribution
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState, create_trial

from ppo_tune.cli import main
from tuner.run.worker import run_worker
from tuner.store.attrs import CONFIG_ATTR, RACE_OF_ATTR, SEED_ATTR
from tuner.study.defaults import SEED_POLICY
from tuner.study.seed_policy import Racing, SeedPolicy, TrialBudget, best_raced, next_runs, parse_seed_policy
from tuner.study.study_file import load_study_spec
from tuner.study.winner import best_trials

MAX = StudyDirection.MAXIMIZE
RACING = SeedPolicy(name="racing", seeds=3, top_k=2)


def _trial(number: int, value: float | None, state: str = "COMPLETE", race_of: int | None = None,
           seed: int | None = None, kl_past_budget: float | None = None) -> FrozenTrial:
    attrs: dict[str, Any] = {} if race_of is None else {RACE_OF_ATTR: race_of, SEED_ATTR: seed}
    constraints = None if kl_past_budget is None else {"eval/kl (last) <= 10": kl_past_budget}
    trial = create_trial(state=TrialState[state], value=value, params={"learning_rate": 1e-5 * (number + 1)},
                         distributions={"learning_rate": FloatDistribution(1e-6, 1e-3)}, user_attrs=attrs,
                         constraints=constraints)
    trial.number = number
    return trial


def test_the_leaders_get_their_next_seed_counting_queued_runs() -> None:
    trials = [_trial(0, 0.5), _trial(1, 0.9), _trial(2, 0.7), _trial(3, 0.8, race_of=2, seed=1),
              _trial(4, None, "WAITING", race_of=1, seed=1)]
    # Means: 0 -> 0.5, 1 -> 0.9 (one queued), 2 -> 0.75 on two seeds. Leaders (top 2 by mean): 1 and 2.
    runs = [(root.number, seed) for root, seed in next_runs(trials, MAX, RACING, base_seed=0)]
    assert runs == [(1, 2), (2, 2)]
    assert next_runs(trials, MAX, SeedPolicy(), base_seed=0) == []  # single: nothing is re-run


def test_the_winner_is_the_best_mean_over_the_most_seeds() -> None:
    # Trial 1's lucky 0.95 on one seed does not beat trial 0's 0.8 held over three.
    trials = [_trial(0, 0.8), _trial(1, 0.95), _trial(2, 0.78, race_of=0, seed=1), _trial(3, 0.82, race_of=0, seed=2)]
    assert [t.number for t in best_raced(trials, MAX)] == [0]
    trials.append(_trial(4, 0.9, race_of=1, seed=1))
    trials.append(_trial(5, 0.85, race_of=1, seed=2))
    assert [t.number for t in best_raced(trials, MAX)] == [1]  # now it held up too: mean 0.9 over three seeds


def test_a_configuration_clearly_better_on_two_seeds_beats_a_worse_one_on_three() -> None:
    # The seeds vary by about 0.01; 0.70 on two seeds is clearly above 0.60 on three, whatever the count.
    trials = [_trial(0, 0.60), _trial(1, 0.70), _trial(2, 0.61, race_of=0, seed=1), _trial(3, 0.59, race_of=0, seed=2),
              _trial(4, 0.71, race_of=1, seed=1)]
    assert [t.number for t in best_raced(trials, MAX)] == [1]


@pytest.mark.parametrize(("policy", "message"), [
    ({"name": "bandit"}, "seed_policy.name: expected one of single, racing, got 'bandit'"),
    ({"name": "racing", "seeds": 0}, "seed_policy.seeds: expected a positive whole number, got 0"),
    ({"name": "racing", "rounds": 2}, "seed_policy.rounds: unknown key"),
    ({"start": 1.0}, "seed_policy.start: expected a fraction of the study's budget in [0, 1), got 1.0"),
    ({"start": "late"}, "seed_policy.start: expected a fraction of the study's budget in [0, 1), got 'late'"),
    ("racing", "seed_policy: expected a mapping"),
])
def test_bad_seed_policies_exit_2_with_one_line(tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path,
                                                capsys: pytest.CaptureFixture[str], policy: Any, message: str) -> None:
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, seed_policy=policy)
    assert main(["run", str(path), "--storage", f"sqlite:///{tmp_path / 'x.db'}"]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and message in error, error


def test_a_racing_study_reruns_its_leader_on_the_next_seed_and_picks_by_mean(tmp_path: Path, tiny_lm_dir: Path,
                                                                            prompts_file: Path) -> None:
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=4, base={"seed": 5, "total_episodes": 16},
                       seed_policy={"name": "racing", "seeds": 2, "top_k": 1, "start": 0})
    spec = load_study_spec(path)
    run_worker(spec, n_trials=4, timeout=None, threads=1)
    study = optuna.load_study(study_name=spec.name, storage=spec.storage)
    trials = study.get_trials(deepcopy=False)
    reruns = [t for t in trials if RACE_OF_ATTR in t.user_attrs]
    assert reruns, [t.user_attrs for t in trials]
    for rerun in reruns:
        root = trials[rerun.user_attrs[RACE_OF_ATTR]]
        assert rerun.params == root.params  # the same configuration ...
        assert rerun.user_attrs[CONFIG_ATTR]["seed"] == rerun.user_attrs[SEED_ATTR] == 6  # ... on the next seed
        assert root.user_attrs[CONFIG_ATTR]["seed"] == 5
    (best,) = best_trials(study)
    assert best.number in {rerun.user_attrs[RACE_OF_ATTR] for rerun in reruns
                           if rerun.state == TrialState.COMPLETE}  # chosen on two seeds, not one


def test_a_racing_rerun_is_not_pruned_but_still_guarded() -> None:
    # A re-run the pruner stopped left its configuration short of seeds for good (it is never queued again), so a
    # re-run runs to its end; a KL blow-up still stops it.
    from tuner.study.study_file import KLGuard
    from tuner.trial.kl_guard import KLGuardPruner

    pruner = KLGuardPruner(KLGuard(threshold=5.0), inner=optuna.pruners.ThresholdPruner(lower=1e9))  # prunes all
    study = optuna.create_study(direction="maximize", pruner=pruner)
    first = study.ask()
    first.report(0.5, step=1)
    assert first.should_prune()
    rerun = study.ask()
    rerun.set_user_attr(RACE_OF_ATTR, first.number)
    rerun.set_user_attr(SEED_ATTR, 1)
    rerun.report(0.5, step=1)
    assert not rerun.should_prune()
    rerun.set_user_attr("kl_history", [1.0, 12.0])  # the level (6.5) past the guard's threshold
    assert rerun.should_prune()


def test_a_study_that_names_no_policy_races_late_unless_it_has_several_objectives() -> None:
    default = parse_seed_policy(None, objectives=1)
    assert default == SeedPolicy(**SEED_POLICY) and default.racing and 0 < default.start < 1
    assert parse_seed_policy(None, objectives=2) == SeedPolicy()  # no one mean to race on
    assert not SeedPolicy().racing
    # A section without a name is the default with its own keys on top; a named one takes the default's numbers.
    assert parse_seed_policy({"seeds": 3}, 1) == SeedPolicy("racing", 3, SEED_POLICY["top_k"], SEED_POLICY["start"])
    assert parse_seed_policy({"name": "single"}, 1) == SeedPolicy("single")
    assert parse_seed_policy({"name": "racing", "start": 0}, 1) == SeedPolicy("racing", start=0.0)


def test_a_trial_budget_counts_started_trials_or_time_whichever_is_nearer_its_end() -> None:
    trials = [_trial(0, 0.5), _trial(1, None, "PRUNED"), _trial(2, None, "FAIL"), _trial(3, None, "RUNNING"),
              _trial(4, None, "WAITING")]
    budget = TrialBudget(n_trials=10, timeout=None)
    assert budget.spent(trials) == 0.4  # four started; a queued trial has not
    assert budget.room(trials) == 5  # ... but takes a place
    assert TrialBudget(n_trials=10, timeout=100.0, started_at=0.0).spent(trials) > 1  # the clock ran out long ago
    assert TrialBudget(n_trials=None, timeout=None).spent(trials) == 1.0  # unbounded: nothing holds racing back
    assert TrialBudget(n_trials=None, timeout=1e9).room(trials) is None
    # Past the timeout no trial starts, so a race has room for none: a re-run queued then would only wait.
    assert TrialBudget(n_trials=None, timeout=100.0, started_at=0.0).room(trials) == 0
    assert TrialBudget(n_trials=10, timeout=100.0, started_at=0.0).room(trials) == 0


def test_racing_waits_for_its_start_and_queues_no_more_than_the_budget_has_room_for() -> None:
    study = optuna.create_study(direction="maximize")
    for number, value in enumerate([0.5, 0.9, 0.7, 0.8]):
        study.add_trial(_trial(number, value))
    policy = SeedPolicy("racing", seeds=2, top_k=3, start=0.5)
    Racing(policy, base_seed=0, budget=TrialBudget(n_trials=10, timeout=None))(study, study.trials[-1])
    assert len(study.trials) == 4  # 4 of 10 started: before the start
    Racing(policy, base_seed=0, budget=TrialBudget(n_trials=6, timeout=None))(study, study.trials[-1])
    queued = [t for t in study.trials if t.state == TrialState.WAITING]
    # 4 of 6 started: racing; the top 3 want a second seed, the budget has room for 2, the two best by mean.
    assert [(t.user_attrs[RACE_OF_ATTR], t.user_attrs[SEED_ATTR]) for t in queued] == [(1, 1), (3, 1)]


def test_racing_queues_nothing_once_parallel_workers_have_started_more_than_the_budget() -> None:
    # Two `ppo-tune run` of one 3-trial study can each start a trial before seeing the other's: 4 started of 3. The
    # budget then has no room; a room of -1 once queued all but the last of the leaders' re-runs, which no worker
    # ran (CI at d0b6972: trial 4 left WAITING).
    study = optuna.create_study(direction="maximize")
    for number, value in enumerate([0.5, 0.9, 0.7, 0.8]):
        study.add_trial(_trial(number, value))
    budget = TrialBudget(n_trials=3, timeout=None)
    assert budget.room(study.trials) == 0
    Racing(SeedPolicy("racing", seeds=2, top_k=2, start=0.5), base_seed=0, budget=budget)(study, study.trials[-1])
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 4


@pytest.mark.parametrize("state", ["PRUNED", "FAIL"])
def test_a_trial_stopped_past_the_start_still_races_the_leaders(state: str) -> None:
    # SmolLM2's second look: the trials that ended past 80% of its 12 were all stopped by the KL guard, so a race run
    # only on completed trials never queued, and its winner stood on one seed.
    study = optuna.create_study(direction="maximize")
    for number, value in enumerate([0.5, 0.9, 0.7]):
        study.add_trial(_trial(number, value))
    study.add_trial(_trial(3, None, state))
    policy = SeedPolicy("racing", seeds=2, top_k=2, start=0.5)
    Racing(policy, base_seed=0, budget=TrialBudget(n_trials=6, timeout=None))(study, study.trials[-1])
    queued = [t for t in study.trials if t.state == TrialState.WAITING]
    assert [(t.user_attrs[RACE_OF_ATTR], t.user_attrs[SEED_ATTR]) for t in queued] == [(1, 1), (2, 1)]


def test_a_study_without_a_seed_policy_races_its_leader_in_its_last_fifth(tmp_path: Path, tiny_lm_dir: Path,
                                                                          prompts_file: Path) -> None:
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=6, base={"seed": 5, "total_episodes": 16})
    spec = load_study_spec(path)
    assert spec.seed_policy == SeedPolicy(**SEED_POLICY)
    run_worker(spec, n_trials=6, timeout=None, threads=1)
    study = optuna.load_study(study_name=spec.name, storage=spec.storage)
    trials = study.get_trials(deepcopy=False)
    reruns = [t for t in trials if RACE_OF_ATTR in t.user_attrs]
    # After trial 4, 5 of 6 trials had started (past 80%): the leader then is re-run as the last trial, on seed 6.
    assert [t.number for t in reruns] == [5], [t.user_attrs for t in trials]
    assert len(trials) == 6 and all(t.state == TrialState.COMPLETE for t in trials)  # nothing left queued
    (rerun,) = reruns
    leader = max(trials[:5], key=lambda t: (t.value, -t.number))
    assert rerun.user_attrs[RACE_OF_ATTR] == leader.number and rerun.user_attrs[CONFIG_ATTR]["seed"] == 6
    (best,) = best_trials(study)
    assert best.number == leader.number  # the only configuration on two seeds


def test_the_progress_line_shows_a_raced_winners_mean_over_its_seeds(tmp_path: Path) -> None:
    from tuner.run.follow import best_text
    from tuner.store.attrs import SPEC_ATTR

    study = optuna.create_study(direction="maximize")
    study.set_user_attr(SPEC_ATTR, {"objectives": [{"metric": "m"}]})  # no seed_policy: the default races
    for trial in [_trial(0, 0.8), _trial(1, 0.95), _trial(2, 0.7, race_of=0, seed=1)]:
        study.add_trial(trial)
    assert best_text(study) == "best 0.7500, mean of 2 seeds (trial 0)"
    study.set_user_attr(SPEC_ATTR, {"objectives": [{"metric": "m"}], "seed_policy": {"name": "single"}})
    assert best_text(study) == "best 0.9500, one seed (trial 1)"  # one seed: the luckiest run wins


def test_the_best_trials_figure_reads_the_same_in_run_show_best_and_the_dashboard(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dashboard.frames import best_summary, number
    from dashboard.study_reader import StudyRef, build_study_view, open_reader
    from tuner.run.follow import best_text
    from tuner.store.attrs import SPEC_ATTR
    from tuner.store.database import create_engine
    from tuner.store.records import create_tables

    url = f"sqlite:///{tmp_path / 'raced.db'}"
    create_tables(create_engine(url))
    study = optuna.create_study(study_name="raced", storage=url, direction="maximize")
    study.set_user_attr(SPEC_ATTR, {"objectives": [{"metric": "m"}]})  # the default seed policy races
    for trial in [_trial(0, 0.8), _trial(1, 0.95), _trial(2, 0.7, race_of=0, seed=1)]:
        study.add_trial(trial)
    # Trial 0 wins on its mean over 2 seeds, 0.75; its own first run scored 0.8, trial 1's one run 0.95.
    assert best_text(study) == "best 0.7500, mean of 2 seeds (trial 0)"
    capsys.readouterr()
    assert main(["show", "raced", "--storage", url]) == 0
    assert "best trial 0: 0.7500, mean of 2 seeds" in capsys.readouterr().out
    assert main(["best", "raced", "--storage", url]) == 0
    assert capsys.readouterr().out.startswith("# best trial 0: 0.7500, mean of 2 seeds\n")
    reader = open_reader(StudyRef(url, "raced"))
    summary = best_summary(build_study_view(reader.ref, reader.refresh()))
    assert summary.startswith("**Best trial #0**") and f"= {number(0.75)} (mean of 2 seeds)" in summary


def test_validate_takes_the_race_s_winner_not_the_best_run_of_a_configuration_the_race_threw_out() -> None:
    from tuner.production.validation import top_trials
    from tuner.store.attrs import SPEC_ATTR

    # SmolLM2's third look: configuration 0 had the best runs, but two of its three ended past the KL budget, so the
    # race chose configuration 1 (every run within it); validate ranked run by run and validated configuration 0.
    study = optuna.create_study(direction="maximize")
    study.set_user_attr(SPEC_ATTR, {"objectives": [{"metric": "m"}], "seed_policy": {"seeds": 3}})
    for trial in [_trial(0, 0.530, kl_past_budget=-3.8), _trial(1, 0.512, kl_past_budget=-8.5),
                  _trial(2, 0.536, race_of=0, seed=1, kl_past_budget=9.0),
                  _trial(3, 0.482, race_of=1, seed=1, kl_past_budget=-6.5),
                  _trial(4, 0.590, race_of=0, seed=2, kl_past_budget=3.1),
                  _trial(5, 0.530, race_of=1, seed=2, kl_past_budget=-6.9), _trial(6, 0.507, kl_past_budget=-9.9)]:
        study.add_trial(trial)
    (best,) = best_trials(study)
    assert best.number == 1
    assert [t.number for t in top_trials(study, 1)] == [1]
    # Then the configurations on fewer seeds, then the one the budget threw out, each once.
    assert [t.number for t in top_trials(study, 5)] == [1, 6, 0]
    # A study of one seed per trial ranks run by run, as before: the best run within the budget.
    study.set_user_attr(SPEC_ATTR, {"objectives": [{"metric": "m"}], "seed_policy": {"name": "single"}})
    assert [t.number for t in top_trials(study, 1)] == [0]

