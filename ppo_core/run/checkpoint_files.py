"""Checkpoints on disk: where they live, how one is written so that a reader never sees half of it, how the older
ones go, and how a reader tells a whole checkpoint from a damaged one. No torch: ``ppo-tune train`` finds the
checkpoint of an interrupted run before it imports the trainer.

A run's checkpoints are ``<output_dir>/checkpoints/checkpoint-<update>/`` (TrainingArguments' ``checkpoint-<step>``
names, in a directory of their own so that a run directory keeps a fixed set of entries). Each is written into a
hidden ``.checkpoint-<update>.<random>.tmp`` beside it, its ``manifest.json`` last (every file's size and SHA-256),
each file flushed to the disk, then renamed into place: a directory named ``checkpoint-<update>`` with a manifest is
whole. A write that fails (a full disk) removes its temporary directory and raises :class:`RunFailure` in one line;
the checkpoints already there are untouched. Only once a new checkpoint is in place are the older ones removed,
keeping the last ``save_total_limit``.

Example::

    path = write_checkpoint(Path("runs/a/checkpoints"), 12, write_parts, {"update": 12})
    remove_older(Path("runs/a/checkpoints"), 12, keep=1)
    update, latest = complete_checkpoints(Path("runs/a/checkpoints"))[-1]
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ppo_core.errors import InputError, RunFailure, first_line

CHECKPOINTS_DIR = "checkpoints"  # under a run's output directory
MANIFEST = "manifest.json"
_NAME = re.compile(r"^checkpoint-(\d+)$")
_CHUNK = 1 << 20


class CheckpointError(InputError):
    """A checkpoint that cannot be resumed from: damaged, not a checkpoint, or made by another config or version.
    Bad input (exit 2): the run it would continue is the user's to choose, never overwritten."""


def checkpoints_dir(output_dir: str | Path) -> Path:
    """Where a run writing to ``output_dir`` keeps its checkpoints."""
    return Path(output_dir) / CHECKPOINTS_DIR


def checkpoint_name(update: int) -> str:
    """``checkpoint-<update>``: TrainingArguments' name, with PPO updates for its optimizer steps."""
    return f"checkpoint-{update}"


def complete_checkpoints(directory: Path) -> list[tuple[int, Path]]:
    """The whole checkpoints in ``directory`` (named ``checkpoint-<update>`` and holding a manifest), by update,
    oldest first; none for a directory that does not exist."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    found = [(int(match.group(1)), directory / name) for name in names if (match := _NAME.match(name))]
    return sorted((update, path) for update, path in found if (path / MANIFEST).is_file())


def write_checkpoint(directory: Path, update: int, write: Callable[[Path], None], manifest: dict[str, Any]) -> Path:
    """Write ``checkpoint-<update>`` in ``directory``: ``write`` fills a hidden temporary directory, whose files
    this then records (size and SHA-256) in ``manifest`` and flushes to the disk, before one rename puts it in place
    (replacing a checkpoint of the same update). An OSError while writing (a full disk) removes the temporary
    directory and raises RunFailure naming the checkpoint and the error."""
    final = directory / checkpoint_name(update)
    staging: Path | None = None
    try:
        directory.mkdir(parents=True, exist_ok=True)
        staging = _hidden(directory, final.name, "tmp")
        write(staging)
        files = {name: _file_record(staging / name) for name in sorted(os.listdir(staging))}
        _write_synced(staging / MANIFEST, json.dumps({**manifest, "files": files}, indent=1).encode())
        _sync(staging)
        _replace(staging, final)
        _sync(directory)
    except BaseException as error:  # a full disk, or Ctrl-C or SIGTERM part way: no temporary directory is left
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        if isinstance(error, OSError):
            raise RunFailure(f"cannot write checkpoint {str(final)!r} ({error.strerror or first_line(error)})") \
                from error
        raise
    return final


def write_file(path: Path, save: Callable[[Any], None]) -> None:
    """``save(file)`` into a new file at ``path``, flushed to the disk before it returns. ``save`` writes through
    the Python file object, so that a full disk raises OSError (torch.save given a path raises a RuntimeError)."""
    with path.open("wb") as file:
        save(file)
        file.flush()
        os.fsync(file.fileno())


def remove_older(directory: Path, update: int, keep: int | None) -> None:
    """After ``checkpoint-<update>`` is written: remove the checkpoints of later updates (left by an earlier attempt
    at the run, which this one started again before), all but the last ``keep`` up to it (every one when ``keep``
    is None), and the temporary directories of writes that never finished. Each goes by a rename first, so none is
    ever half there."""
    whole = complete_checkpoints(directory)
    current = [path for done, path in whole if done <= update]
    old = [path for done, path in whole if done > update]
    old += current[: max(len(current) - keep, 0)] if keep is not None else []
    unfinished = [directory / name for name in _listing(directory) if name.startswith(".checkpoint-")]
    for path in [*old, *unfinished]:
        try:
            aside = path if path.name.startswith(".") else path.rename(_hidden_name(directory, path.name, "old"))
        except OSError:
            continue
        shutil.rmtree(aside, ignore_errors=True)


def read_manifest(checkpoint: Path) -> dict[str, Any]:
    """The manifest of the checkpoint at ``checkpoint``; CheckpointError when there is none or it is unreadable."""
    where = str(checkpoint)
    if not checkpoint.is_dir():
        raise CheckpointError(f"checkpoint {where!r}: no such directory")
    try:
        manifest = json.loads((checkpoint / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {where!r} is not a whole checkpoint (it has no {MANIFEST})") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"checkpoint {where!r} is damaged ({MANIFEST}: {first_line(error)})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict) or \
            not isinstance(manifest.get("update"), int):
        raise CheckpointError(f"checkpoint {where!r} is damaged ({MANIFEST} lacks its files or update)")
    return manifest


def verify_files(checkpoint: Path, manifest: dict[str, Any]) -> None:
    """Every file the manifest lists is there with its recorded size and SHA-256; CheckpointError naming the first
    that is not (a disk error, a truncated copy, an edit)."""
    for name, record in manifest["files"].items():
        path = checkpoint / name
        try:
            found = _file_record(path)
        except OSError as error:
            raise CheckpointError(f"checkpoint {str(checkpoint)!r} is damaged ({name}: "
                                  f"{error.strerror or first_line(error)})") from None
        if found != record:
            what = f"{found['bytes']} bytes where {record.get('bytes')} were written" \
                if found["bytes"] != record.get("bytes") else "its SHA-256 differs from the one written"
            raise CheckpointError(f"checkpoint {str(checkpoint)!r} is damaged ({name}: {what})")


def _file_record(path: Path) -> dict[str, Any]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as file:
        while chunk := file.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return {"bytes": size, "sha256": digest.hexdigest()}


def _write_synced(path: Path, data: bytes) -> None:
    write_file(path, lambda file: file.write(data))


def _sync(directory: Path) -> None:
    """Flush a directory's entries (a rename, a new file) to the disk."""
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _replace(staging: Path, final: Path) -> None:
    """Rename ``staging`` to ``final``; a checkpoint already there is moved aside first and removed after."""
    if not final.exists():
        staging.rename(final)
        return
    aside = final.rename(_hidden_name(final.parent, final.name, "old"))
    staging.rename(final)
    shutil.rmtree(aside, ignore_errors=True)


def _listing(directory: Path) -> list[str]:
    try:
        return os.listdir(directory)
    except OSError:
        return []


def _hidden_name(directory: Path, name: str, kind: str) -> Path:
    return directory / f".{name}.{secrets.token_hex(4)}.{kind}"


def _hidden(directory: Path, name: str, kind: str) -> Path:
    """A new, empty hidden directory in ``directory``, made as ``mkdir`` makes one (tempfile's are private)."""
    while True:
        path = _hidden_name(directory, name, kind)
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path


__all__ = ["CHECKPOINTS_DIR", "MANIFEST", "CheckpointError", "checkpoint_name", "checkpoints_dir",
           "complete_checkpoints", "read_manifest", "remove_older", "verify_files", "write_checkpoint", "write_file"]
