"""Bad storages and bad study files: one line and nothing created, never a traceback, never a write where none belongs.

Each test is one bad input to the storage, the study file or the dashboard. A read-only file system is a real one:
the command runs in a mount namespace of its own (``unshare``) where the directory is bind-mounted read-only, which
stops root too, and which nothing outlives.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import optuna
import psutil
import pytest
from helpers.studies import (
    TESTS_DIR,
    check_nothing_lost_or_duplicated,
    load,
    postgres_url,
    still_running,
    wait_for,
    write_study,
)
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

from ppo_tune.cli import main
from tools.screenshots import free_port
from tuner.run.worker import open_study
from tuner.search.space import suggest_params
from tuner.store.attrs import CONFIG_ATTR, SPEC_ATTR
from tuner.store.database import StorageError, open_read_only_storage, open_storage, sqlite_path
from tuner.study.study_file import load_study_spec

pytestmark = pytest.mark.heavy  # starts processes or studies: scheduled first

REPO = TESTS_DIR.parent
NOT_A_DATABASE = b"SQLite? No: a text file that happens to end in .db.\n" * 64


@pytest.fixture(autouse=True)
def reward_functions_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    # Worker processes import the test reward functions by name, as users' own modules would be.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(TESTS_DIR))


def one_line(text: str) -> str:
    """The only line of ``text`` (a command's stderr); fails on a traceback or any second line."""
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def journal_mode(path: Path) -> str:
    # Read through an immutable URI, so that asking cannot change the answer.
    with sqlite3.connect(f"file:{path}?immutable=1", uri=True) as connection:
        return str(connection.execute("PRAGMA journal_mode").fetchone()[0])


def add_completed_trial(study: optuna.Study, value: float) -> None:
    study.add_trial(optuna.trial.create_trial(
        params={"learning_rate": 1e-4}, distributions={"learning_rate": FloatDistribution(1e-5, 1e-3, log=True)},
        value=value, user_attrs={CONFIG_ATTR: {"learning_rate": 1e-4, "seed": 0}}))


def plain_optuna_database(path: Path, name: str = "good") -> str:
    """A database made by Optuna alone (rollback journal, as Optuna leaves SQLite): one study, one finished trial."""
    url = f"sqlite:///{path}"
    storage = optuna.storages.RDBStorage(url)
    add_completed_trial(optuna.create_study(study_name=name, storage=storage, direction="maximize"), 0.5)
    storage.engine.dispose()
    return url


def ppo_tune_database(path: Path, name: str = "good") -> str:
    """A database opened as ``ppo-tune run`` opens it (WAL mode), closed again: no -wal or -shm file is left."""
    url = f"sqlite:///{path}"
    storage = open_storage(url)
    add_completed_trial(optuna.create_study(study_name=name, storage=storage, direction="maximize"), 0.5)
    storage.engine.dispose()
    assert not path.with_name(path.name + "-wal").exists()
    return url


def ppo_tune(*argv: str, cwd: Path = REPO, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ppo_tune", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def on_read_only_file_system(directory: Path, argv: Sequence[str],
                             cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """``python -m ppo_tune ARGV`` with ``directory`` mounted read-only (skips where mount namespaces are not allowed).

    The script first proves the mount refuses a write (exit 97 otherwise), so a pass cannot come from a writable
    directory.
    """
    script = 'mount --bind -o ro "$0" "$0" || exit 98; touch "$0/.probe" 2>/dev/null && exit 97; exec "$@"'
    namespace = ["unshare", "--mount"] + ([] if os.geteuid() == 0 else ["--map-root-user"])
    completed = subprocess.run([*namespace, "sh", "-c", script, str(directory), sys.executable, "-m", "ppo_tune",
                                *argv], cwd=cwd, capture_output=True, text=True, timeout=300)
    if completed.returncode == 98 or "unshare failed" in completed.stderr:
        pytest.skip(f"no read-only bind mount here: {completed.stderr.strip()}")
    assert completed.returncode != 97, "the bind mount is writable"
    return completed


# --- run: storages that cannot be opened -------------------------------------------------------------------------


@pytest.mark.parametrize(("where", "reason"), [
    ("directory", "is a directory"),
    ("long_name", "File name too long"),
])
def test_run_on_a_sqlite_path_that_cannot_be_a_database_is_one_line(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str], where: str,
    reason: str,
) -> None:
    study = write_study(tmp_path, tiny_lm_dir, prompts_file)
    target = tmp_path / "a_directory" if where == "directory" else tmp_path / ("x" * 5000 + ".db")
    if where == "directory":
        target.mkdir()
    before = sorted(tmp_path.iterdir())
    assert main(["run", str(study), "--storage", f"sqlite:///{target}"]) == 2
    error = one_line(capsys.readouterr().err)
    assert "storage" in error and reason in error, error
    assert sorted(tmp_path.iterdir()) == before


def test_run_on_a_read_only_file_system_is_one_line(tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path) -> None:
    study = write_study(tmp_path, tiny_lm_dir, prompts_file)
    read_only = tmp_path / "read_only"
    read_only.mkdir()
    completed = on_read_only_file_system(read_only, ["run", str(study), "--storage",
                                                     f"sqlite:///{read_only / 'new.db'}"])
    assert completed.returncode == 2, completed.stderr
    error = one_line(completed.stderr)
    assert "Read-only file system" in error and str(read_only / "new.db") in error, error
    assert list(read_only.iterdir()) == []


# --- corrupt databases --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["run", "list", "show", "best"])
def test_a_corrupt_database_is_one_line_and_left_as_it_was(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str], command: str,
) -> None:
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(NOT_A_DATABASE)
    argv = {"run": [str(write_study(tmp_path, tiny_lm_dir, prompts_file))], "list": [], "show": ["tiny"],
            "best": ["tiny"]}[command]
    assert main([command, *argv, "--storage", f"sqlite:///{corrupt}"]) == 2
    error = one_line(capsys.readouterr().err)
    assert f"{corrupt} is not a SQLite database" in error, error
    assert corrupt.read_bytes() == NOT_A_DATABASE
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix != ".yaml") == ["corrupt.db"]


@pytest.mark.parametrize("command", ["list", "show"])
def test_a_corrupt_database_among_several_is_named_and_the_others_are_still_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command: str,
) -> None:
    studies = tmp_path / "studies"
    studies.mkdir()
    plain_optuna_database(studies / "a_good.db", "good")
    (studies / "b_corrupt.db").write_bytes(NOT_A_DATABASE)
    plain_optuna_database(studies / "c_good.db", "other")
    monkeypatch.chdir(tmp_path)  # the default storages: every studies/*.db here
    assert main([command, *(["good"] if command == "show" else [])]) == 0
    captured = capsys.readouterr()
    warning = one_line(captured.err)
    assert "b_corrupt.db" in warning and "not a SQLite database" in warning, warning
    assert "good" in captured.out
    if command == "list":
        assert "other" in captured.out


# --- read-only commands -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["list", "show", "best"])
def test_reading_commands_never_change_a_database_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str,
) -> None:
    path = tmp_path / "plain.db"
    url = plain_optuna_database(path)
    before, mode = digest(path), journal_mode(path)
    assert mode == "delete"
    assert main([command, *([] if command == "list" else ["good"]), "--storage", url]) == 0, capsys.readouterr().err
    assert "good" in capsys.readouterr().out or command == "best"
    assert journal_mode(path) == "delete"  # `list` switched a plain Optuna database to WAL
    assert digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain.db"]


@pytest.mark.parametrize("made_by", ["optuna", "ppo-tune"])
@pytest.mark.parametrize("command", ["list", "show", "best"])
def test_reading_commands_work_on_a_read_only_file_system(tmp_path: Path, command: str, made_by: str) -> None:
    read_only = tmp_path / "read_only"
    read_only.mkdir()
    path = read_only / "study.db"
    url = (plain_optuna_database if made_by == "optuna" else ppo_tune_database)(path)
    completed = on_read_only_file_system(read_only, [command, *([] if command == "list" else ["good"]),
                                                     "--storage", url])
    assert completed.returncode == 0, completed.stderr
    assert "Traceback" not in completed.stderr
    assert ("good" in completed.stdout) if command != "best" else ("learning_rate" in completed.stdout)
    assert [p.name for p in read_only.iterdir()] == ["study.db"]


# --- studies ppo-tune did not create ------------------------------------------------------------------------------


@pytest.mark.parametrize("directions", [["maximize", "maximize"], ["maximize"]], ids=["two_objectives", "one"])
def test_run_refuses_a_study_of_the_same_name_that_ppo_tune_did_not_create(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str],
    directions: list[Literal["minimize", "maximize"]],
) -> None:
    study_file = write_study(tmp_path, tiny_lm_dir, prompts_file)
    url = f"sqlite:///{tmp_path / 'tiny.db'}"  # the storage the study file names by default
    storage = optuna.storages.RDBStorage(url)
    outside = optuna.create_study(study_name="tiny", storage=storage, directions=directions)
    outside.set_user_attr("owner", "someone else")
    storage.engine.dispose()
    before = digest(tmp_path / "tiny.db")
    assert main(["run", str(study_file)]) == 2
    error = one_line(capsys.readouterr().err)
    assert "study 'tiny'" in error and "not created by ppo-tune" in error, error
    assert digest(tmp_path / "tiny.db") == before
    outside = optuna.load_study(study_name="tiny", storage=url)
    assert outside.user_attrs == {"owner": "someone else"} and SPEC_ATTR not in outside.user_attrs
    assert outside.get_trials() == []


def test_run_refuses_an_outside_study_on_postgresql_before_writing_to_it(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    # On PostgreSQL the check runs once the storage is open (there is no file to read first): still before any write.
    url = postgres_url()
    name = f"outside_{os.getpid()}_{int(time.time())}"
    study_file = write_study(tmp_path, tiny_lm_dir, prompts_file, name=name, storage=url)
    outside = optuna.create_study(study_name=name, storage=url, directions=["maximize", "minimize"])
    try:
        assert main(["run", str(study_file)]) == 2
        error = one_line(capsys.readouterr().err)
        assert "not created by ppo-tune" in error and ":***@" in error and ":ppo_tune@" not in error, error
        outside = optuna.load_study(study_name=name, storage=url)
        assert outside.user_attrs == {} and outside.get_trials() == []
    finally:
        optuna.delete_study(study_name=name, storage=url)


# --- several `ppo-tune run` at once -------------------------------------------------------------------------------


def test_runs_of_one_study_started_at_the_same_moment_on_a_new_sqlite_file_all_end_well(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path,
) -> None:
    # Two commands racing to create the file and its tables, then two workers running one SQLite study at once: they
    # lose and duplicate nothing. (Several workers of one command run a study on PostgreSQL in
    # tests/test_tuner/test_tuner_runs.py, and on SQLite under one worker killed there.)
    commands = 2  # two racing to create the file and its tables are the race; a third only costs a process
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=3,
                       base={"total_episodes": 16, "num_sample_generations": 1})
    processes = [subprocess.Popen([sys.executable, "-m", "ppo_tune", "run", str(path)], cwd=tmp_path,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(commands)]
    outputs = [process.communicate(timeout=600) for process in processes]
    for process, (_, err) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, err
        assert "Traceback" not in err, err
    trials = load(path).get_trials(deepcopy=False)
    assert sum(t.state == TrialState.COMPLETE for t in trials) >= 3
    assert all(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials), \
        [(t.number, t.state.name, {k: v for k, v in t.user_attrs.items() if k != "config"}) for t in trials]
    # Every trial's metrics and samples were kept, each update's once.
    check_nothing_lost_or_duplicated(path, n_trials=3)


# --- checked before anything is created ---------------------------------------------------------------------------


@pytest.mark.parametrize(("overrides", "flags", "message"), [
    ({"sampler": {"name": "tpe", "n_startup_trial": 3}}, [], "sampler.n_startup_trial: not an option of TPESampler"),
    ({"sampler": {"name": "random", "seed": "zero"}}, [], "sampler.seed: expected a whole number"),
    ({"sampler": {"name": "random", "seed": -1}}, [], "sampler.seed: must be between 0 and"),
    ({"sampler": {"name": "tpe", "n_startup_trials": "ten"}}, [], "sampler.n_startup_trials: expected a whole"),
    ({"pruner": {"name": "median", "n_warmup_steps": "x"}}, [], "pruner.n_warmup_steps: expected a whole"),
    ({"n_trials": True}, [], "n_trials: expected a positive whole number, got true"),
    ({"timeout": -5}, [], "timeout: must be > 0 seconds, got -5"),
    ({"timeout": float("inf")}, [], "timeout: must be > 0 seconds"),
    ({}, ["--timeout", "-1"], "--timeout: must be > 0 seconds, got -1"),
    ({}, ["--timeout", "nan"], "--timeout: must be > 0 seconds, got nan"),
    ({"heartbeat_interval": "often"}, [], "heartbeat_interval: expected a whole number"),
    ({"heartbeat_interval": 0}, [], "heartbeat_interval: must be >= 1"),
    ({"search_space": {"kl_coef": {"type": "categorical", "choices": [0.05, "high", -1]}}}, [],
     "search_space.kl_coef: 'high' is not a number"),
    ({"search_space": {"kl_coef": {"type": "categorical", "choices": [0.05, 0.1, -1]}}}, [],
     "search_space.kl_coef: the choice -1 cannot run: kl_coef"),
    ({"search_space": {"num_ppo_epochs": {"type": "categorical", "choices": [1, 2.5]}}}, [],
     "search_space.num_ppo_epochs: 2.5 is not a whole number"),
    ({"search_space": {"gamma": {"type": "float", "low": 0.9, "high": 1.5}}}, [],
     "search_space.gamma: the high end 1.5 cannot run: gamma"),
    ({"search_space": {}}, [], "search_space: empty"),
    ({"storage": "foo://bar/baz"}, [], "storage: unsupported scheme 'foo'"),
    ({}, ["--storage", "foo://bar/baz"], "storage: unsupported scheme 'foo'"),
    ({}, ["--storage", "not a url"], "storage: "),
])
def test_a_study_that_cannot_run_is_refused_before_anything_is_created(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str],
    overrides: dict[str, Any], flags: list[str], message: str,
) -> None:
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, **overrides)
    assert main(["run", str(path), *flags]) == 2
    error = one_line(capsys.readouterr().err)
    assert message in error, error
    if "scheme" in message:
        assert "sqlite" in error and "postgresql" in error, error
    assert sorted(tmp_path.iterdir()) == [path]  # no database, no tables, nothing


# --- a resumed seeded study does not repeat itself ----------------------------------------------------------------


def _sample(study: optuna.Study, space: Any, base: dict[str, Any], count: int) -> list[tuple[Any, ...]]:
    points = []
    for _ in range(count):
        trial = study.ask()
        points.append(tuple(sorted(suggest_params(trial, space, base).items())))
        study.tell(trial, 1.0)
    return points


@pytest.mark.parametrize("sampler", [{"name": "random", "seed": 0}, {"name": "tpe", "seed": 0}])
def test_a_resumed_seeded_study_does_not_propose_the_points_it_already_tried(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, sampler: dict[str, Any],
) -> None:
    space = {"learning_rate": {"type": "float", "low": 1e-4, "high": 1e-3, "log": True},
             "kl_coef": {"type": "float", "low": 0.01, "high": 0.2, "log": True}}
    spec = load_study_spec(write_study(tmp_path, tiny_lm_dir, prompts_file, sampler=sampler, search_space=space))
    # Each open is what a worker does when a study (re)starts: a new process, a new sampler from the same seed.
    first, _ = open_study(spec, heartbeat=False)
    before = _sample(first, spec.search_space, spec.base, 2)
    resumed, _ = open_study(spec, heartbeat=False)
    after = _sample(resumed, spec.search_space, spec.base, 2)
    assert not set(after) & set(before), (before, after)
    # A fresh study from the same file still proposes what it proposed the first time: the seed holds.
    spec.storage = f"sqlite:///{tmp_path / 'again.db'}"
    again, _ = open_study(spec, heartbeat=False)
    assert _sample(again, spec.search_space, spec.base, 2) == before


# --- the dashboard ------------------------------------------------------------------------------------------------


def _end_with_descendants(process: subprocess.Popen[str]) -> None:
    for child in psutil.Process(process.pid).children(recursive=True):
        child.kill()
    process.kill()
    process.wait()


@pytest.mark.parametrize("storage", ["missing", "corrupt", "unknown_scheme"])
def test_the_dashboard_refuses_a_storage_it_cannot_read_before_starting_a_server(
    tmp_path: Path, storage: str,
) -> None:
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(NOT_A_DATABASE)
    url = {"missing": f"sqlite:///{tmp_path / 'missing.db'}", "corrupt": f"sqlite:///{corrupt}",
           "unknown_scheme": "foo://bar/baz"}[storage]
    expected = {"missing": "no database at", "corrupt": "is not a SQLite database",
                "unknown_scheme": "unsupported scheme 'foo'"}[storage]
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "ppo_tune", "dashboard", "--storage", url, "--port", str(port)],
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, err = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        _end_with_descendants(process)
        pytest.fail("the dashboard started a server for a storage it cannot read")
    assert process.returncode == 2, err
    assert expected in one_line(err), err
    assert not (tmp_path / "missing.db").exists()
    assert corrupt.read_bytes() == NOT_A_DATABASE


def _serving(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def test_sigterm_stops_the_dashboards_server_and_exits_143(tmp_path: Path) -> None:
    url = plain_optuna_database(tmp_path / "study.db")
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "ppo_tune", "dashboard", "--storage", url, "--port", str(port)],
                               cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    server: list[psutil.Process] = []
    try:
        wait_for(lambda: _serving(port), 120, "the dashboard to serve")
        server = psutil.Process(process.pid).children(recursive=True)
        assert server
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 143
        wait_for(lambda: not still_running(server), 15, "the Streamlit server to stop")
        assert not _serving(port)  # the server kept serving after `ppo-tune dashboard` had gone
    finally:
        for leftover in [*server, psutil.Process(process.pid)] if process.poll() is None else server:
            with contextlib.suppress(psutil.NoSuchProcess):
                leftover.kill()
        process.wait()


# Optuna writes two version rows after making its tables: its own, then alembic's.
@pytest.mark.parametrize("unwritten", ["version_info", "alembic_version"])
def test_a_sqlite_file_another_run_is_creating_is_no_study_to_refuse_yet(
    tmp_path: Path, tiny_lm_dir: Path, prompts_file: Path, unwritten: str,
) -> None:
    # Three runs started at once on a new file: one had made Optuna's tables and not yet written a version row when
    # another read the file to check the study was ppo-tune's. Optuna's read-only storage then tried to write that
    # row, and the run failed with "attempt to write a readonly database".
    path = write_study(tmp_path, tiny_lm_dir, prompts_file, n_trials=1)
    spec = load_study_spec(path)
    open_storage(spec.storage).engine.dispose()
    with contextlib.closing(sqlite3.connect(str(sqlite_path(spec.storage)))) as connection, connection:
        connection.execute(f"DELETE FROM {unwritten}")  # the moment between the tables and that row
    with pytest.raises(StorageError, match="being created") as error:
        open_read_only_storage(spec.storage)
    assert "\n" not in str(error.value)
    study, _ = open_study(spec)  # the writing run finishes the creation, as the first run does
    assert study.study_name == spec.name


@pytest.mark.parametrize("url", ["postgresql://ppo@localhost/studies", "postgresql+psycopg://ppo@localhost/studies",
                                 "postgresql+psycopg2://ppo@localhost/studies"])
def test_a_missing_postgresql_driver_is_named_with_its_install_command(
        url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # Regression: `list` said Optuna's "Failed to import DB access module ... Please install appropriate one." and
    # the dashboard "ModuleNotFoundError: No module named 'psycopg'", neither naming the extra.
    for driver in ("psycopg", "psycopg2"):
        monkeypatch.setitem(sys.modules, driver, None)  # what Python does for a module that is not installed
    install = "pip install 'ppo-tune[postgres]'"
    assert main(["list", "--storage", url]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(install) and "driver is not installed" in err[0]
    if "psycopg2" in url:  # a driver the URL names is named, since the extra installs another
        assert "install psycopg2, or use postgresql://" in err[0]
    # The dashboard reads through the same checks, before its server starts and on each page.
    for open_ in (open_read_only_storage, open_storage):
        with pytest.raises(StorageError, match=r"driver is not installed .*pip install 'ppo-tune\[postgres\]'$"):
            open_(url)
