"""Checkpoints on disk, without a model: written whole or not at all, the older ones removed once a newer one is
complete, when a run saves one, how a resumed run's metrics file continues, and how ``ppo-tune train`` finds the
interrupted run of its output directory."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
import yaml

from ppo_core import PPOConfig
from ppo_core.errors import RunFailure
from ppo_core.run.callbacks import JsonlWriter
from ppo_core.run.checkpoint import is_save_update, save_interval
from ppo_core.run.checkpoint_files import complete_checkpoints, read_manifest, remove_older, write_checkpoint
from ppo_core.run.directory import RunDirectory, interrupted_runs


def write(directory: Path, update: int, keep: int | None = 1) -> Path:
    """A checkpoint of two small files, then the garbage collection that follows each."""
    def parts(staging: Path) -> None:
        (staging / "a.pt").write_bytes(bytes([update]) * 100)
        (staging / "b.pt").write_bytes(b"b")

    path = write_checkpoint(directory, update, parts, {"update": update})
    remove_older(directory, update, keep)
    return path


def updates(directory: Path) -> list[int]:
    return [update for update, _ in complete_checkpoints(directory)]


def test_a_checkpoint_records_its_files_and_the_older_ones_go_once_it_is_whole(tmp_path: Path) -> None:
    path = write(tmp_path, 2)
    manifest = read_manifest(path)
    assert manifest["update"] == 2 and manifest["files"]["a.pt"]["bytes"] == 100
    assert set(manifest["files"]) == {"a.pt", "b.pt"}
    write(tmp_path, 4)
    assert updates(tmp_path) == [4]
    for update in (6, 8):
        write(tmp_path, update, keep=2)
    assert updates(tmp_path) == [6, 8]
    write(tmp_path, 10, keep=None)
    assert updates(tmp_path) == [6, 8, 10]
    # A run that started again from update 6 overtakes the checkpoints an earlier attempt wrote past it.
    write(tmp_path, 7, keep=None)
    assert updates(tmp_path) == [6, 7]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-6", "checkpoint-7"]  # nothing hidden left


@pytest.mark.parametrize("error", [OSError(errno.ENOSPC, "No space left on device"), KeyboardInterrupt()])
def test_a_write_that_fails_part_way_leaves_no_half_checkpoint(tmp_path: Path, error: BaseException) -> None:
    before = write(tmp_path, 2)

    def fails(staging: Path) -> None:
        (staging / "a.pt").write_bytes(b"half")
        raise error

    expected = RunFailure if isinstance(error, OSError) else KeyboardInterrupt
    with pytest.raises(expected) as raised:
        write_checkpoint(tmp_path, 4, fails, {"update": 4})
    if isinstance(error, OSError):  # one line naming the checkpoint and the problem
        assert str(raised.value) == f"cannot write checkpoint {str(tmp_path / 'checkpoint-4')!r} (No space left on " \
                                    "device)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-2"] and read_manifest(before)["update"] == 2


def test_a_directory_without_its_manifest_is_no_checkpoint(tmp_path: Path) -> None:
    write(tmp_path, 2)
    (tmp_path / "checkpoint-9").mkdir()  # what a copy cut short might leave: never taken for the latest
    (tmp_path / ".checkpoint-5.0a1b2c3d.tmp").mkdir()
    assert updates(tmp_path) == [2]
    write(tmp_path, 3, keep=None)
    assert not (tmp_path / ".checkpoint-5.0a1b2c3d.tmp").exists()  # an unfinished write's leftovers go


@pytest.mark.parametrize(("save_steps", "saved"), [(None, []), (3.0, [3, 6, 9, 10]), (0.25, [3, 6, 9, 10]),
                                                   (20.0, [10])])
def test_a_run_saves_every_save_steps_updates_and_after_the_last(save_steps: float | None, saved: list[int]) -> None:
    config = PPOConfig(save_steps=save_steps, output_dir="runs/x")
    interval = save_interval(config, 10)
    assert [update for update in range(1, 11) if is_save_update(update, 10, interval)] == saved


@pytest.mark.parametrize(("values", "message"), [
    ({"save_steps": 0.0}, "save_steps: must be > 0"),
    ({"save_steps": 2.5}, "save_steps: must be a whole number of updates when >= 1"),
    ({"save_total_limit": 0}, "save_total_limit: must be >= 1"),
])
def test_bad_checkpoint_settings_are_config_errors(values: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PPOConfig(**values)  # type: ignore[arg-type]


def test_save_steps_without_an_output_directory_is_refused_before_the_run() -> None:
    with pytest.raises(ValueError, match="save_steps: needs output_dir"):
        save_interval(PPOConfig(save_steps=2), 10)


def test_a_resumed_metrics_file_keeps_the_updates_up_to_its_checkpoint(tmp_path: Path) -> None:
    rows = [{"update": update, "x": update} for update in range(5)]
    text = "".join(json.dumps(row) + "\n" for row in rows) + '{"update": 5, "x"'  # the kill cut the last line
    (tmp_path / "metrics.jsonl").write_text(text)
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps({"update": u}) + "\n" for u in (0, 2, 4)))
    writer = JsonlWriter(tmp_path, resume_at=2)
    assert (tmp_path / "metrics.jsonl").read_text() == text  # untouched until the trainer accepts the checkpoint
    writer.on_train_begin(None, 10)
    assert [json.loads(line)["update"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [0, 1, 2]
    assert [json.loads(line)["update"] for line in (tmp_path / "samples.jsonl").read_text().splitlines()] == [0, 2]
    writer.on_update(3, {"update": 3})
    assert writer.updates == 4 and (tmp_path / "metrics.jsonl").read_text().endswith('{"update": 3}\n')


def test_the_interrupted_runs_of_an_output_are_those_no_process_holds(tmp_path: Path) -> None:
    def run_of(path: Path, output: str) -> Path:
        path.mkdir()
        (path / "config.yaml").write_text(yaml.safe_dump({"output_dir": output}))
        return path

    output = tmp_path / "out"
    incomplete = run_of(tmp_path / "out.incomplete", "out")
    killed = run_of(tmp_path / ".out.0a1b2c3d.partial", "runs/out")
    run_of(tmp_path / ".out.11111111.partial", "other")  # another output whose name begins alike
    assert interrupted_runs(output) == [killed, incomplete]
    live = RunDirectory.open(output, overwrite=False)  # a run writing there now holds its staging directory
    (live.staging / "config.yaml").write_text(yaml.safe_dump({"output_dir": "out"}))
    assert interrupted_runs(output) == [killed, incomplete]
    resumed = RunDirectory.resume(output, killed, overwrite=False)
    assert interrupted_runs(output) == [incomplete]  # taken up: renamed, and held
    assert resumed.staging.parent == tmp_path and resumed.staging.name.endswith(".partial")
    live.abandon(0)
    resumed.abandon(1)
    assert interrupted_runs(output) == [incomplete]  # what the resumed run kept replaced the old .incomplete
