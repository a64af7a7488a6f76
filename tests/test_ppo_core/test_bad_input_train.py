"""What a user can get wrong with ``ppo-tune train`` (and ``--help``), and faults of the machine: each gives one line
and an exit status, never a traceback, and never changes or leaves behind a run directory that contradicts itself.

Bad input exits 2, a failure at run time (a full disk) or a divergence exits 1, Ctrl-C exits 130, and an unexpected
error says where its traceback was written. The runs are real: a tiny GPT-2 (tests/conftest.py) trained for one to
three updates against a reward function written into the test's directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.train_cli import one_line, private_mount, snapshot, write_module

from ppo_tune.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_CONFIG = ROOT / "studies" / "train.yaml"

# A run of 1 update (8 episodes of 4-token responses, one PPO epoch): a few seconds on one CPU core.
BASE: dict[str, Any] = {
    "task": None, "response_length": 4, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 2,
    "total_episodes": 8, "num_ppo_epochs": 1, "num_sample_generations": 0, "num_eval_prompts": 2,
    "learning_rate": 1e-3, "stop_token": "eos",
}

REWARDS = '''
CALLS = 0


def count_a(prompts, completions, **kwargs):
    return [float(text.split().count("a")) for text in completions]


def length(prompts, completions, **kwargs):
    return [float(len(text)) for text in completions]


def raises(prompts, completions, **kwargs):
    raise ValueError("this reward is broken")


def one_score(prompts, completions, **kwargs):
    return [1.0]


def nan_score(prompts, completions, **kwargs):
    return [float("nan")] * len(completions)


def out_of_memory(prompts, completions, **kwargs):
    raise MemoryError("cannot allocate 1 TiB")


def _second_call(error):
    global CALLS
    CALLS += 1
    if CALLS >= 2:
        raise error
    return [0.0] * 8


def raises_at_second_update(prompts, completions, **kwargs):
    return _second_call(ValueError("broke at the second update"))


def interrupted_at_second_update(prompts, completions, **kwargs):
    return _second_call(KeyboardInterrupt())
'''


def reward_module(directory: Path, source: str = REWARDS) -> str:
    """Write ``source`` (these tests' rewards) as a module of a fresh name into ``directory``."""
    return write_module(directory, source)


def write_config(path: Path, **values: Any) -> Path:
    path.write_text(yaml.safe_dump({**BASE, **values}))
    return path


@pytest.fixture
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_lm_dir: Path, prompts_file: Path) -> Path:
    """A working directory holding a reward module; ``config(...)`` there writes a run config on the tiny GPT-2."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # no __pycache__ beside the reward modules
    return tmp_path


def config(directory: Path, lm: Path, prompts: Path, reward: str, name: str = "run.yaml", **values: Any) -> Path:
    return write_config(directory / name, **{"sft_model_path": str(lm), "dataset_name": str(prompts),
                                                   "reward_funcs": [reward], **values})


def train(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, str]:
    status = main(["train", *arguments, "--quiet"])
    return status, capsys.readouterr().err


# --- help -------------------------------------------------------------------------------------------------------


def commands() -> list[str]:
    parser = build_parser()
    (subparsers,) = [action for action in parser._actions if action.dest == "command"]
    return sorted(subparsers.choices)  # type: ignore[arg-type]


@pytest.mark.parametrize("command", ["", *commands()])
def test_help_of_every_command_prints_usage_and_exits_0(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    # The top level lists every subcommand's help text: a "95% CI" there went through argparse's %-formatting.
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"] if command else ["--help"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith("usage: ppo-tune")


# --- the config file --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "content", "message"), [
    ("binary.yaml", b"\x89PNG\r\n\x1a\n\x00\xff\xfe\x00", "is not UTF-8 text"),
    ("empty.yaml", b"", "is empty"),
    ("comments.yaml", b"# nothing set yet\n", "is empty"),
    ("braces.yaml", b"{}\n", "is empty"),
    ("empty.json", b"{}", "is empty"),
    ("twice.yaml", b"kl_coef: 0.1\nlearning_rate: 1.0e-5\nkl_coef: 0.2\n", "kl_coef: given twice"),
    ("twice.json", b'{"kl_coef": 0.1, "kl_coef": 0.2}', "kl_coef: given twice"),
    ("inf.yaml", b"kl_coef: .inf\n", "kl_coef: must be a finite number, got inf"),
    ("minus_inf.yaml", b"learning_rate: -.inf\n", "learning_rate: must be a finite number, got -inf"),
    ("nan.yaml", b"cliprange: .nan\n", "cliprange: must be a finite number, got nan"),
    ("overflow.yaml", b"temperature: 1.0e999\n", "temperature: must be a finite number, got inf"),
    ("overflow_text.yaml", b"temperature: '1e999'\n", "temperature: must be a finite number, got inf"),
    ("inf.json", b'{"kl_coef": Infinity}', "kl_coef: must be a finite number, got inf"),
    ("weights.yaml", b"reward_weights: [1.0, .nan]\n", "reward_weights: must be finite numbers, got [1.0, nan]"),
    ("number_key.yaml", b"1: 2\n", "1: unknown config key"),
])
def test_bad_config_file_exits_2_with_one_line_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, content: bytes, message: str,
) -> None:
    config_file = tmp_path / name
    config_file.write_bytes(content)
    status, error = train(capsys, str(config_file), "--output", str(tmp_path / "out"))
    assert status == 2
    assert one_line(error).startswith("ppo-tune train: error: ") and message in error, error
    assert sorted(os.listdir(tmp_path)) == [name]


def test_non_finite_override_is_refused_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, error = train(capsys, str(SHIPPED_CONFIG), "--set", "kl_coef=.nan", "--output", str(tmp_path / "out"))
    assert status == 2 and "kl_coef: must be a finite number, got nan" in one_line(error)
    assert not (tmp_path / "out").exists()


# --- models and rewards that fail before the first update ----------------------------------------------------------

SYNTAX_ERROR = "def count_a(prompts, completions, **kwargs)\n    return [0.0] * len(completions)\n"
RAISES_AT_IMPORT = "raise RuntimeError('this module needs an API key')\n"


@pytest.mark.parametrize(("case", "message"), [
    ("syntax error", "SyntaxError: "),
    ("raises at import", "RuntimeError: this module needs an API key"),
    ("missing module", "cannot import module 'no_such_rewards'"),
    ("missing function", "has no callable 'no_such_function'"),
    ("reward raises", "raised ValueError: this reward is broken"),
    ("one score for 8 completions", "returned 1 scores for 8 completions"),
    ("unknown task", "task: unknown task 'atari'"),
    ("empty model directory", "sft_model_path: "),
    ("missing model directory", "sft_model_path: no model at "),
])
def test_a_run_that_fails_before_its_first_update_leaves_nothing_behind(
    run_dir: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str], case: str, message: str,
) -> None:
    rewards = reward_module(run_dir)
    values: dict[str, Any] = {}
    reward = f"{rewards}:count_a"
    if case == "syntax error":
        reward = f"{reward_module(run_dir, SYNTAX_ERROR)}:count_a"
    elif case == "raises at import":
        reward = f"{reward_module(run_dir, RAISES_AT_IMPORT)}:count_a"
    elif case == "missing module":
        reward = "no_such_rewards:count_a"
    elif case == "missing function":
        reward = f"{rewards}:no_such_function"
    elif case == "reward raises":
        reward = f"{rewards}:raises"
    elif case == "one score for 8 completions":
        reward = f"{rewards}:one_score"
    elif case == "unknown task":
        values["task"] = "atari"
    elif case == "empty model directory":
        (run_dir / "empty_model").mkdir()
        values["sft_model_path"] = str(run_dir / "empty_model")
    elif case == "missing model directory":
        values["sft_model_path"] = str(run_dir / "models" / "sft-final")
    config_file = config(run_dir, tiny_lm_dir, prompts_file, reward, **values)
    before = sorted(os.listdir(run_dir))
    status, error = train(capsys, str(config_file), "--output", str(run_dir / "runs" / "first"))
    assert status == 2
    line = one_line(error)
    assert line.startswith("ppo-tune train: error: ") and message in line, line
    if case in ("syntax error", "raises at import"):
        assert line.startswith("ppo-tune train: error: reward_funcs: "), line  # the field, then the module
    if case == "missing model directory":
        assert line.endswith(f"no model at {str(run_dir / 'models' / 'sft-final')!r}"), line
    # No run directory, no staging directory, not even runs/: nothing that looks like a run.
    assert sorted(os.listdir(run_dir)) == before


def test_a_reward_that_returns_nan_is_named(
    run_dir: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    rewards = reward_module(run_dir)
    config_file = config(run_dir, tiny_lm_dir, prompts_file, f"{rewards}:nan_score")
    status, error = train(capsys, str(config_file), "--output", str(run_dir / "out"))
    assert status == 1
    line = one_line(error)
    assert line.startswith("ppo-tune train: diverged: objective/scores is nan at update 1"), line
    assert f"reward {rewards}:nan_score returned nan for 8 of 8 completions" in line, line


# --- the output directory ---------------------------------------------------------------------------------------


def test_output_under_a_file_exits_2(run_dir: Path, tiny_lm_dir: Path, prompts_file: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    config_file = config(run_dir, tiny_lm_dir, prompts_file, f"{reward_module(run_dir)}:count_a")
    (run_dir / "notes.txt").write_text("not a directory\n")
    status, error = train(capsys, str(config_file), "--output", str(run_dir / "notes.txt" / "run"))
    assert status == 2
    assert one_line(error).startswith("ppo-tune train: error: --output: ") and "is a file" in error, error
    assert (run_dir / "notes.txt").read_text() == "not a directory\n"


def test_output_with_a_5000_character_name_exits_2(run_dir: Path, tiny_lm_dir: Path, prompts_file: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    config_file = config(run_dir, tiny_lm_dir, prompts_file, f"{reward_module(run_dir)}:count_a")
    before = sorted(os.listdir(run_dir))
    status, error = train(capsys, str(config_file), "--output", str(run_dir / ("r" * 5000)))
    assert status == 2
    line = one_line(error)
    assert line.startswith("ppo-tune train: error: --output: ") and "too long" in line, line
    assert len(line) < 400  # the name is not echoed in full
    assert sorted(os.listdir(run_dir)) == before


def test_output_on_a_read_only_file_system_exits_2(run_dir: Path, tiny_lm_dir: Path, prompts_file: Path) -> None:
    config_file = config(run_dir, tiny_lm_dir, prompts_file, f"{reward_module(run_dir)}:count_a")
    (run_dir / "readonly").mkdir()
    script = 'mount -t tmpfs -o ro,size=1m tmpfs "$1" && exec "$2" -m ppo_tune train "$3" --output "$1/run" --quiet'
    done = private_mount(script, str(run_dir / "readonly"), sys.executable, str(config_file), cwd=run_dir)
    assert done.returncode == 2, done.stderr
    line = one_line(done.stderr)
    assert line.startswith("ppo-tune train: error: --output: ") and "Read-only file system" in line, line


def test_a_second_run_into_a_run_directory_is_refused_unless_overwrite(
    run_dir: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    rewards = reward_module(run_dir)
    # Scores that differ between responses, so that each run moves the model (all-equal scores train nothing).
    config_file = config(run_dir, tiny_lm_dir, prompts_file, f"{rewards}:length")
    keep = run_dir / "runs" / "keep"
    assert train(capsys, str(config_file), "--output", str(keep))[0] == 0
    first = snapshot(keep)
    assert {"config.yaml", "metrics.jsonl", "samples.jsonl", "model/model.safetensors"} <= set(first)

    status, error = train(capsys, str(config_file), "--output", str(keep))
    assert status == 2
    assert "--output: " in one_line(error) and "already holds a run" in error and "--overwrite" in error, error
    assert snapshot(keep) == first

    # A run that fails, with or without --overwrite, leaves the run it would have replaced as it was.
    bad = config(run_dir, tiny_lm_dir, prompts_file, f"{rewards}:raises", name="bad.yaml")
    for flags in ([], ["--overwrite"]):
        assert train(capsys, str(bad), "--output", str(keep), *flags)[0] == 2
        assert snapshot(keep) == first
        assert sorted(os.listdir(run_dir / "runs")) == ["keep"]

    status, error = train(capsys, str(config_file), "--output", str(keep), "--overwrite", "--set", "seed=7")
    assert status == 0, error
    second = snapshot(keep)
    assert second["model/model.safetensors"] != first["model/model.safetensors"]
    assert yaml.safe_load(second["config.yaml"])["seed"] == 7
    assert sorted(os.listdir(run_dir / "runs")) == ["keep"]  # the old run and the staging directory are gone


@pytest.mark.parametrize("overwrite", [False, True])
def test_output_holding_other_files_is_refused_even_with_overwrite(
    run_dir: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str], overwrite: bool,
) -> None:
    config_file = config(run_dir, tiny_lm_dir, prompts_file, f"{reward_module(run_dir)}:count_a")
    mine = snapshot(run_dir)
    status, error = train(capsys, str(config_file), "--output", str(run_dir), *(["--overwrite"] if overwrite else []))
    assert status == 2
    assert "--output: " in one_line(error) and "not a ppo-tune run" in error, error
    assert snapshot(run_dir) == mine



def test_bad_input_is_refused_before_torch_is_imported(tmp_path: Path) -> None:
    # Importing the trainer (torch, transformers, peft) took 7.5 s of CPU before a missing file was named; everything
    # a run is refused for is checked first. Each case runs in a fresh interpreter, where nothing has imported torch.
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "a b"}\n')
    (tmp_path / "occupied").mkdir()
    (tmp_path / "occupied" / "notes.txt").write_text("mine")
    missing_model = write_config(tmp_path / "missing_model.yaml", **{
        **BASE, "sft_model_path": "./no_such_model", "dataset_name": str(tmp_path / "prompts.jsonl"),
        "reward_funcs": ["mod:fn"]})
    cases = {
        "no such file": [str(tmp_path / "absent.yaml")],
        "cliprange: must be > 0": [str(SHIPPED_CONFIG), "--set", "cliprange=0"],
        "sft_model_path: no model at": [str(missing_model)],
        "not a ppo-tune run": [str(SHIPPED_CONFIG), "--output", str(tmp_path / "occupied")],
    }
    code = ("import json, sys; from ppo_tune.cli import main; status = main(['train', *sys.argv[1:]]); "
            "print(json.dumps([status, 'torch' in sys.modules]))")
    for message, arguments in cases.items():
        done = subprocess.run([sys.executable, "-c", code, *arguments], capture_output=True, text=True, cwd=tmp_path,
                              check=False)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == [2, False], (message, done.stderr)
        assert message in one_line(done.stderr), done.stderr

@pytest.mark.parametrize(("reward", "status", "message"), [
    ("raises_at_second_update", 2, "raised ValueError: broke at the second update"),
    ("interrupted_at_second_update", 130, "interrupted"),
])
def test_a_run_stopped_after_its_first_update_keeps_its_metrics_beside_the_run_directory(
    run_dir: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str],
    reward: str, status: int, message: str,
) -> None:
    rewards = reward_module(run_dir)
    keep = run_dir / "runs" / "keep"
    good = config(run_dir, tiny_lm_dir, prompts_file, f"{rewards}:count_a")
    assert train(capsys, str(good), "--output", str(keep))[0] == 0
    first = snapshot(keep)
    failing = config(run_dir, tiny_lm_dir, prompts_file, f"{rewards}:{reward}", name="failing.yaml",
                     total_episodes=24)
    code, error = train(capsys, str(failing), "--output", str(keep), "--overwrite")
    assert code == status
    line = one_line(error)
    assert message in line and f"its metrics so far (1 update) are in {str(keep) + '.incomplete'!r}" in line, line
    assert snapshot(keep) == first
    incomplete = run_dir / "runs" / "keep.incomplete"
    assert sorted(os.listdir(run_dir / "runs")) == ["keep", "keep.incomplete"]
    metrics = [json.loads(text) for text in (incomplete / "metrics.jsonl").read_text().splitlines()]
    assert [m["update"] for m in metrics] == [1.0]
    assert not (incomplete / "model").exists()
    assert yaml.safe_load((incomplete / "config.yaml").read_text())["output_dir"] == str(keep)


def test_a_full_disk_leaves_the_previous_run_and_exits_1(
    run_dir: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    config_file = config(run_dir, tiny_lm_dir, prompts_file, f"{reward_module(run_dir)}:count_a")
    assert train(capsys, str(config_file), "--output", str(run_dir / "first"))[0] == 0
    first = snapshot(run_dir / "first")
    assert len(first["model/model.safetensors"]) > 64 * 1024  # more than the full disk below leaves free
    (run_dir / "disk").mkdir()
    # A 2 MiB tmpfs holding a copy of the first run, filled up but for 48 KiB: enough for the new run's config and
    # metrics, not for its model. What the full disk holds afterwards is copied out before the tmpfs goes.
    script = """
        set -e
        mount -t tmpfs -o size=2m tmpfs disk
        cp -a first disk/keep
        "$1" -c 'import os
fd = os.open("disk/filler", os.O_WRONLY | os.O_CREAT)
try:
    while True:
        os.write(fd, bytes(4096))
except OSError:
    os.ftruncate(fd, os.fstat(fd).st_size - 48 * 1024)'
        set +e
        "$1" -m ppo_tune train "$2" --output disk/keep --overwrite --quiet 2> stderr.txt
        echo $? > status.txt
        ls -A disk > listing.txt
        cp -a disk/keep after
    """
    done = private_mount(script, sys.executable, str(config_file), cwd=run_dir)
    assert done.returncode == 0, done.stderr
    assert (run_dir / "status.txt").read_text().strip() == "1"
    line = one_line((run_dir / "stderr.txt").read_text())
    assert line.startswith("ppo-tune train: failed: ") and "No space left on device" in line, line
    assert snapshot(run_dir / "after") == first  # the previous run, whole: not half a model
    # What the failed run wrote before the disk filled (its metrics) is kept beside it, not in it.
    assert (run_dir / "listing.txt").read_text().split() == ["filler", "keep", "keep.incomplete"]


# --- errors nobody expected -------------------------------------------------------------------------------------


@pytest.mark.parametrize("debug", [False, True])
def test_an_unexpected_error_says_where_its_traceback_is(
    run_dir: Path, tiny_lm_dir: Path, prompts_file: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch, debug: bool,
) -> None:
    (run_dir / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(run_dir / "tmp"))  # where the traceback goes
    config_file = config(run_dir, tiny_lm_dir, prompts_file, f"{reward_module(run_dir)}:out_of_memory")
    status, error = train(capsys, str(config_file), "--output", str(run_dir / "out"), *(["--debug"] if debug else []))
    assert status == 1
    last = error.strip().splitlines()[-1]
    assert last.startswith("ppo-tune train: unexpected error: MemoryError: cannot allocate 1 TiB"), error
    written = sorted((run_dir / "tmp").glob("ppo-tune-*traceback*"))
    if debug:  # the traceback itself, then the line
        assert error.startswith("Traceback (most recent call last):") and 'raise MemoryError("cannot' in error
        assert not written
    else:
        one_line(error)
        assert len(written) == 1 and last.endswith(f"(full traceback in {written[0]}; --debug prints it)"), last
        assert 'raise MemoryError("cannot' in written[0].read_text()
    assert not (run_dir / "out").exists()


def test_debug_is_accepted_before_or_after_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for arguments in (["--debug", "train", str(tmp_path / "none.yaml")], ["train", str(tmp_path / "none.yaml"),
                                                                         "--debug"]):
        assert main(arguments) == 2
        assert "no such file" in capsys.readouterr().err
