"""A population study end to end on the tiny model: members trained in segments, the weakest copying the strongest
and perturbing the learning rate and KL coefficient, the lineage in the study's database, each member's curve whole
from update 0, and the winner's config a schedule that, replayed from scratch, is the run the population made."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
import torch
from helpers.ctrl_c import default_sigint
from helpers.studies import TESTS_DIR, Gate, descendants, load, still_running, stored_rows, wait_for, write_study
from optuna.trial import TrialState

from ppo_core.config.io import build_config
from ppo_core.config.schedules import value_at
from ppo_core.metric_names import run_metrics
from ppo_core.run.trainer import PPOTrainer
from ppo_tune.cli import main
from tuner.population.controller import EXTINCT
from tuner.population.lineage import lineage_lines
from tuner.production.validation import validation_study_name
from tuner.store.attrs import CONFIG_ATTR, CPU_THREADS_ATTR, DUPLICATE_OF_ATTR, RETRY_OF_ATTR, VALIDATES_ATTR
from tuner.store.database import open_storage
from tuner.store.segments import generation_slots, lineage, segment_of
from tuner.study.study_file import load_study_spec
from tuner.study.winner import read_winner
from tuner.trial.checkpoints import study_checkpoints

pytestmark = pytest.mark.heavy  # starts processes and studies: scheduled first

SPACE = {"learning_rate": {"type": "float", "low": 1e-4, "high": 3e-3, "log": True},
         "kl_coef": {"type": "float", "low": 0.01, "high": 0.5, "log": True}}


@pytest.fixture(autouse=True)
def functions_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    # The trials import the test reward and judge functions by name, as users' own modules would be.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(TESTS_DIR))


def population_study(tmp_path: Path, lm_dir: Path, prompts: Path, population: dict[str, Any] | None = None,
                     base: dict[str, Any] | None = None, space: dict[str, Any] | None = None,
                     **overrides: Any) -> Path:
    """6 updates a member (48 episodes of 8), ranked every 2 on a held-out judge: 3 generations of 3 members."""
    return write_study(
        tmp_path, lm_dir, prompts, name="population", n_trials=None,
        objectives=[{"metric": "eval/judge_score", "direction": "maximize", "reduce": "last"}],
        base={"total_episodes": 48, "eval_steps": 2, "judge_funcs": ["reward_functions:count_letter_a"],
              "num_eval_samples": 4, "num_sample_generations": 0, "kl_in_reward": True, **(base or {})},
        search_space=space or SPACE,
        # A budget no run nears: each ranking forecasts every member's held-out KL against it, and none is held back.
        constraints=[{"metric": "eval/kl", "reduce": "last", "max": 1000.0}],
        population={"size": 3, "segment": 2, "quantile": 0.25, "mutate": ["learning_rate", "kl_coef"],
                    "resample": 0.0, **(population or {})},
        **overrides,
    )


def test_a_population_trains_in_segments_copies_its_best_and_its_winner_replays_as_a_schedule(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    path = population_study(tmp_path, tiny_lm_dir, prompts_file)
    spec = load_study_spec(path)
    # Two workers: one that ends its segment first waits for the generation's last, and a generation both see end
    # at once is queued twice, the second copy of each segment stopping at its start.
    assert main(["run", str(path), "--workers", "2"]) == 0
    study = load(path)
    twice = [t for t in study.get_trials() if DUPLICATE_OF_ATTR in t.user_attrs]
    assert all(t.state == TrialState.PRUNED for t in twice)
    trials = [t for t in study.get_trials() if segment_of(t) is not None and t not in twice]
    # 3 members x 3 generations, each segment a trial of its own, none failed.
    assert sorted((s.generation, s.member) for t in trials if (s := segment_of(t))) == \
        [(g, m) for g in range(3) for m in range(3)]
    assert all(t.state == TrialState.COMPLETE for t in trials), [t.user_attrs for t in trials]

    exploits = 0
    for generation in (1, 2):
        before, now = generation_slots(trials, generation - 1), generation_slots(trials, generation)
        copies = 0
        for member, trial in now.items():
            segment = segment_of(trial)
            assert segment is not None and (segment.start, segment.stop) == (2 * generation, 2 * generation + 2)
            parent = next(t for t in before.values() if t.number == segment.parent)
            if segment.origin == "continue":
                assert parent is before[member] and not segment.mutated
                assert trial.user_attrs[CONFIG_ATTR] == parent.user_attrs[CONFIG_ATTR]
            else:
                copies += 1
                assert segment.origin == "exploit" and parent.values[0] >= before[member].values[0]
                config = trial.user_attrs[CONFIG_ATTR]
                for name, schedule in (("learning_rate", "learning_rate_schedule"), ("kl_coef", "kl_coef_schedule")):
                    old, new = segment.mutated[name]
                    assert old == value_at(parent.user_attrs[CONFIG_ATTR].get(schedule), config[name], segment.start)
                    assert config[schedule][-1] == [segment.start + 1, new] and new == trial.params[name]
                    assert new / old in (pytest.approx(0.8), pytest.approx(1.25)) or new in (
                        SPACE[name]["low"], SPACE[name]["high"])
            # The segment's rows begin with its parent's, copied: its trial holds its lineage's whole curve.
            rows = stored_rows(spec.storage, trial.number)
            assert [int(row["update"]) for row in rows] == list(range(1, segment.stop + 1))
            assert rows[:segment.start] == stored_rows(spec.storage, parent.number)[:segment.start]
        # The bottom member copies a top one (cut: one of 3), unless it ties with every donor.
        assert copies <= 1
        exploits += copies
    assert exploits >= 1

    # Only the last generation's checkpoints are kept: nothing can reach the others.
    kept = sorted(p.name for p in study_checkpoints(spec.storage, spec.name).iterdir())
    assert kept == sorted(f"trial-{t.number}" for t in generation_slots(trials, 2).values())

    winner = read_winner(study).best
    last = segment_of(winner) if winner is not None else None
    assert winner is not None and last is not None and last.generation == 2
    capsys.readouterr()
    assert main(["best", spec.name, "--storage", spec.storage, "--format", "yaml"]) == 0
    printed = capsys.readouterr().out
    assert f"# lineage of trial {winner.number}" in printed and "updates 5-6" in printed

    # validate replays the winner's schedule from scratch on a fresh seed: a run of its config, not a population.
    assert main(["validate", spec.name, "--storage", spec.storage, "--top-k", "1", "--seeds", "1",
                 "--workers", "1"]) == 0
    (replay,) = optuna.load_study(study_name=validation_study_name(spec.name),
                                  storage=open_storage(spec.storage)).get_trials()
    assert replay.state == TrialState.COMPLETE and segment_of(replay) is None
    assert replay.user_attrs[VALIDATES_ATTR] == winner.number
    assert {**replay.user_attrs[CONFIG_ATTR], "seed": 0} == {**winner.user_attrs[CONFIG_ATTR], "seed": 0}
    assert replay.user_attrs[CONFIG_ATTR]["seed"] != winner.user_attrs[CONFIG_ATTR]["seed"]

    # Replayed from scratch, a config the population made (the winner's, or a member's that copied another and so
    # holds a schedule) is the run its lineage made, update for update.
    finals = sorted(generation_slots(trials, 2).values(), key=lambda t: t.number != winner.number)
    replayed = next(t for t in finals if any(s.origin == "exploit" for _, s in lineage(trials, t)))
    config = build_config({**replayed.user_attrs[CONFIG_ATTR], "output_dir": str(tmp_path / "replay")})
    assert config.learning_rate_schedule and config.kl_coef_schedule
    threads = torch.get_num_threads()
    torch.set_num_threads(replayed.user_attrs[CPU_THREADS_ATTR])  # the sums' order, hence the numbers, depend on it
    try:
        whole = PPOTrainer(config).train().metrics
    finally:
        torch.set_num_threads(threads)
    assert [run_metrics(row) for row in stored_rows(spec.storage, replayed.number)] == [run_metrics(m) for m in whole]


def test_a_population_whose_members_are_all_stopped_ends_and_names_no_winner(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    path = population_study(tmp_path, tiny_lm_dir, prompts_file,
                            hacking_guard=[{"metric": "eval/judge_score", "max": -1.0}])  # crossed at update 2
    spec = load_study_spec(path)
    assert main(["run", str(path), "--workers", "1"]) == 1  # no trial completed
    trials = load(path).get_trials()
    assert [t.state for t in trials] == [TrialState.PRUNED] * 3  # the first generation, and nothing after it
    assert load(path).user_attrs[EXTINCT] == 0
    assert "stopped after generation 0: no member completed it inside the study's constraints" in \
        capsys.readouterr().err
    assert main(["best", spec.name, "--storage", spec.storage]) == 2


def test_a_population_whose_members_all_fail_before_training_ends_instead_of_waiting(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    # Regression: no member reached its first update, so none recorded the run's length, and the controller waited
    # for a ranking that could never come, polling for ever, its study never ending.
    path = population_study(tmp_path, tiny_lm_dir, prompts_file, population={"size": 2},
                            base={"judge_funcs": ["no_such_module:score"]})  # each trial fails as it builds
    assert main(["run", str(path), "--workers", "1"]) == 1  # no trial completed
    study = load(path)
    assert [t.state for t in study.get_trials()] == [TrialState.FAIL] * 2  # the first generation, nothing after
    assert study.user_attrs[EXTINCT] == 0
    assert "stopped after generation 0: no member completed it inside the study's constraints" in \
        capsys.readouterr().err


def test_an_interrupted_population_resumes_its_segment_from_the_parents_checkpoint(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, gate: Gate,
) -> None:
    # 2 members, 2 generations of 2 updates: the last segment is held in its second rollout (update 4) and the study
    # terminated there; run again, the segment starts again from its parent's checkpoint at update 2.
    path = population_study(tmp_path, tiny_lm_dir, prompts_file, population={"size": 2},
                            base={"total_episodes": 32, "reward_model_path": Gate.REWARD})
    spec = load_study_spec(path)
    assert spec.base["reward_model_path"] == Gate.REWARD
    gate.let_pass(3)
    process = subprocess.Popen([sys.executable, "-m", "ppo_tune", "run", str(path), "--workers", "1"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                               preexec_fn=default_sigint)
    held = gate.held_process()
    study_processes = descendants(process.pid)
    assert held in study_processes
    process.send_signal(signal.SIGTERM)
    output = process.communicate(timeout=60)[0].decode()
    gate.open()
    assert process.returncode == 143, output
    wait_for(lambda: not still_running(study_processes), 30, "the stopped study's processes to end")

    assert main(["run", str(path), "--workers", "1"]) == 0
    trials = load(path).get_trials()
    interrupted = [t for t in trials if t.state == TrialState.FAIL]
    assert len(interrupted) == 1 and segment_of(interrupted[0]) == segment_of(trials[-1])
    assert trials[-1].user_attrs[RETRY_OF_ATTR] == interrupted[0].number
    slots = generation_slots(trials, 1)
    assert sorted(slots) == [0, 1] and all(t.state == TrialState.COMPLETE for t in slots.values())
    assert [int(row["update"]) for row in stored_rows(spec.storage, trials[-1].number)] == [1, 2, 3, 4]


def test_a_population_goes_back_to_its_best_earlier_point_and_the_backtrack_replays_as_a_schedule(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path,
) -> None:
    # 2 members, 3 generations of 2 updates, ranked on a judge under which every policy peaks at update 2 (0) and falls
    # after (update 4: -2): ranking generation 1, member 1 goes back to member 0's end at update 2 (the elite: ahead of
    # both members, tied with member 1's end, and the lower trial) and trains updates 3-6.
    path = population_study(tmp_path, tiny_lm_dir, prompts_file, population={"size": 2, "backtrack": 1.0},
                            base={"judge_funcs": ["reward_functions:peaks_at_update_2"]})
    spec = load_study_spec(path)
    # One worker, in this process: the first test runs a population on two workers; this one is about the backtrack.
    assert main(["run", str(path), "--workers", "1"]) == 0
    trials = [t for t in load(path).get_trials() if segment_of(t) is not None and DUPLICATE_OF_ATTR not in t.user_attrs]
    assert all(t.state == TrialState.COMPLETE for t in trials)
    backs = [(t, s) for t in trials if (s := segment_of(t)) is not None and s.origin == "backtrack"]
    assert [(s.generation, s.member, s.parent, s.start, s.stop) for _, s in backs] == [(2, 1, 0, 2, 6)]
    ((trial, segment),) = backs
    elite = next(t for t in trials if t.number == 0)
    assert [t.values[0] for t in trials] == [0.0, 0.0, -2.0, -2.0, -4.0, -4.0]  # by generation, then member
    # Its schedule: the elite's config, perturbed from update 3 on, and unlike member 1's own copy of it at update 2.
    config = trial.user_attrs[CONFIG_ATTR]
    for name, schedule in (("learning_rate", "learning_rate_schedule"), ("kl_coef", "kl_coef_schedule")):
        old, new = segment.mutated[name]
        assert old == value_at(elite.user_attrs[CONFIG_ATTR].get(schedule), config[name], 2)
        assert config[schedule] == [[3, new]] and new == trial.params[name]
    copied = segment_of(generation_slots(trials, 1)[1])
    assert copied is not None and (copied.origin, copied.parent) == ("exploit", 0) and copied.mutated != segment.mutated
    # Its rows: the elite's up to update 2 only, then its own; and its lineage in words.
    rows = stored_rows(spec.storage, trial.number)
    assert [int(row["update"]) for row in rows] == [1, 2, 3, 4, 5, 6]
    assert rows[:2] == stored_rows(spec.storage, elite.number)
    assert lineage_lines(trials, trial)[2].startswith(f"  updates 3-6 trial {trial.number}, went back to trial 0's "
                                                      "update 2, the best earlier point: learning_rate")
    # At the end only the last generation's checkpoints stay: the elite's went with the generations that could go back.
    kept = sorted(p.name for p in study_checkpoints(spec.storage, spec.name).iterdir())
    assert kept == sorted(f"trial-{t.number}" for t in generation_slots(trials, 2).values())

    # Replayed from scratch, the backtracked config is the run its lineage made: the elite's updates, then its own.
    config = build_config({**trial.user_attrs[CONFIG_ATTR], "output_dir": str(tmp_path / "replay")})
    threads = torch.get_num_threads()
    torch.set_num_threads(trial.user_attrs[CPU_THREADS_ATTR])
    try:
        whole = PPOTrainer(config).train().metrics
    finally:
        torch.set_num_threads(threads)
    assert [run_metrics(row) for row in stored_rows(spec.storage, trial.number)] == [run_metrics(m) for m in whole]
