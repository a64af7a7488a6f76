"""Where ``ppo-tune train`` writes a run: a hidden staging directory beside the output directory, renamed into place
when the run is complete.

So the output directory only ever holds a whole run (its config, metrics, samples and model) or nothing:

- a run that fails before its first update leaves nothing behind;
- a run that fails or is interrupted later keeps what it wrote (config, metrics and samples so far, no model) in
  ``<output>.incomplete`` beside the output directory, for a look at what went wrong;
- a run that fails never changes a run already in the output directory, and one that completes replaces it only
  when asked (``--overwrite``), by a rename once the new run is whole;
- a run that stopped part way (its ``.incomplete`` directory, or the staging directory of a process that was killed)
  is found again by :func:`interrupted_runs`, and :meth:`RunDirectory.resume` takes it up as the new run's staging
  directory. A process holds a lock on its staging directory while it writes there, so that no other takes it up.

Example::

    run = RunDirectory.open(Path("runs/keep"), overwrite=False)
    (run.staging / "metrics.jsonl").write_text(...)
    run.commit()  # runs/keep now holds the run; on failure, run.abandon(updates) instead
"""

from __future__ import annotations

import fcntl
import os
import secrets
import shutil
from pathlib import Path

import yaml

from ppo_core.errors import InputError, first_line

# What a run directory holds (ppo_core.cli and its trackers write them): a directory with anything else in it is
# the user's, and is never replaced.
RUN_ENTRIES = frozenset({"config.yaml", "metrics.jsonl", "samples.jsonl", "model", "merged", "trackers",
                         "checkpoints"})
INCOMPLETE_SUFFIX = ".incomplete"
_STAGING_NAME = 64  # characters of the output's name in its staging directory's: well under any NAME_MAX


def is_run_directory(path: Path) -> bool:
    """A directory holding a run and nothing else (an empty one is not a run)."""
    entries = set(os.listdir(path))
    return bool(entries) and entries <= RUN_ENTRIES


def _name_max(path: Path) -> int:
    """The longest file name the file system of ``path`` (an existing directory) takes."""
    try:
        return os.pathconf(path, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def _exists(path: Path) -> bool:
    """Whether ``path`` exists; False also for a name the system cannot even look up (too long, a NUL in it)."""
    try:
        return path.exists() or path.is_symlink()
    except (OSError, ValueError):
        return False


def _existing_ancestor(path: Path) -> Path:
    for ancestor in (path, *path.parents):
        if _exists(ancestor):
            return ancestor
    return Path(path.anchor or ".")


def _shown(path: Path) -> str:
    """``path`` quoted for a one-line message, its middle left out when it is long."""
    text = str(path)
    return repr(text if len(text) <= 160 else f"{text[:100]}...{text[-40:]}")


def check_output(output: Path, overwrite: bool) -> None:
    """Refuse, in one line naming ``--output``, an output directory no run may be written to: a name too long, a
    path through a file, a directory of the user's own files, or (unless ``overwrite``) one that holds a run."""
    absolute = Path(os.path.abspath(output))
    ancestor = _existing_ancestor(absolute)
    if not ancestor.is_dir():
        raise InputError(f"--output: {_shown(ancestor)} is a file, not a directory")
    limit = _name_max(ancestor)
    for part in absolute.relative_to(ancestor).parts:
        if len(os.fsencode(part)) > limit:
            raise InputError(f"--output: a name of {len(part)} characters is too long (this file system takes "
                             f"{limit}): {part[:40]}...")
    if ancestor != absolute:
        return
    try:
        holds_run, empty = is_run_directory(output), not os.listdir(output)
    except OSError as error:
        raise InputError(f"--output: cannot read {_shown(output)} ({error.strerror})") from None
    if not holds_run and not empty:
        raise InputError(f"--output: {_shown(output)} holds files that are not a ppo-tune run; choose a new or empty "
                         f"directory")
    if holds_run and not overwrite:
        raise InputError(f"--output: {_shown(output)} already holds a run; pass --overwrite to replace it once the "
                         f"new run completes, or choose another directory")


class RunDirectory:
    """A run's output directory and the staging directory it is written to until it is complete."""

    def __init__(self, output: Path, staging: Path, created: list[Path], overwrite: bool,
                 lock: int | None = None) -> None:
        self.output = output
        self.staging = staging
        self.created = created  # the output's parents this run made, deepest last: removed again if it leaves nothing
        self.overwrite = overwrite
        self.lock = lock  # a descriptor holding the staging directory's lock, closed once the run is committed or left

    @classmethod
    def open(cls, output: Path, overwrite: bool) -> RunDirectory:
        """Check ``output`` and make the staging directory beside it; InputError when either cannot be."""
        check_output(output, overwrite)
        created: list[Path] = []
        missing = [parent for parent in (output.parent, *output.parent.parents) if not _exists(parent)]
        try:
            for parent in reversed(missing):
                parent.mkdir()
                created.append(parent)
            staging = _hidden_sibling(output, "partial")
        except (OSError, ValueError) as error:  # ValueError: a NUL in the name
            _remove_empty(created)
            reason = error.strerror if isinstance(error, OSError) else first_line(error)
            raise InputError(f"--output: cannot write in {_shown(output.parent)} ({reason})") from None
        return cls(output, staging, created, overwrite, _locked(staging))

    @classmethod
    def resume(cls, output: Path, interrupted: Path, overwrite: bool) -> RunDirectory:
        """Take up ``interrupted`` (one of :func:`interrupted_runs`) as the staging directory of a run that
        continues it: locked, then renamed to a new hidden staging name. InputError when another process took it
        meanwhile."""
        check_output(output, overwrite)
        lock = _locked(interrupted)
        if lock is None:
            raise InputError(f"--output: another ppo-tune train is continuing the interrupted run in "
                             f"{_shown(interrupted)}")
        staging = _hidden_sibling(output, "partial")
        os.rename(interrupted, staging)  # onto the new, empty directory: one rename
        return cls(output, staging, [], overwrite, lock)

    def commit(self) -> None:
        """Put the complete run in place: a run already there is moved aside first and deleted after."""
        check_output(self.output, self.overwrite)  # the same rules again: another run may have finished meanwhile
        if not _exists(self.output):
            os.rename(self.staging, self.output)
            self._unlock()
            return
        aside = _hidden_sibling(self.output, "replaced")
        os.rename(self.output, aside / "run")
        try:
            os.rename(self.staging, self.output)
        except OSError:
            os.rename(aside / "run", self.output)
            raise
        shutil.rmtree(aside, ignore_errors=True)
        self._unlock()

    def abandon(self, updates: int) -> Path | None:
        """The run failed after ``updates`` updates: with none, remove all it wrote; with some, keep it in
        ``<output>.incomplete`` (replacing an earlier incomplete run) and return where it is."""
        if updates == 0:
            shutil.rmtree(self.staging, ignore_errors=True)
            _remove_empty(self.created)
            self._unlock()
            return None
        incomplete = self.output.with_name(self.output.name + INCOMPLETE_SUFFIX)
        try:
            if incomplete.is_dir() and is_run_directory(incomplete):
                shutil.rmtree(incomplete)
            os.rename(self.staging, incomplete)
        except OSError:  # a name too long for the suffix, or a directory of the user's by that name: keep it hidden
            return self.staging
        finally:
            self._unlock()
        return incomplete

    def _unlock(self) -> None:
        if self.lock is not None:
            os.close(self.lock)  # closing the descriptor releases its lock
            self.lock = None


def interrupted_runs(output: Path) -> list[Path]:
    """The runs into ``output`` that stopped before they completed and that no process holds: its ``.incomplete``
    directory (a run that failed or was interrupted) and the hidden staging directories beside it whose run was
    killed outright, each holding a config for ``output``."""
    parent, name = output.parent, output.name
    prefix = f".{name[:_STAGING_NAME]}."
    try:
        entries = os.listdir(parent)
    except OSError:
        return []
    candidates = [parent / entry for entry in sorted(entries)
                  if entry == name + INCOMPLETE_SUFFIX or (entry.startswith(prefix) and entry.endswith(".partial"))]
    return [path for path in candidates if _config_names(path, name) and not _is_locked(path)]


def _config_names(run: Path, name: str) -> bool:
    """Whether the run directory ``run`` holds a config whose output directory is called ``name``."""
    try:
        config = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(config, dict) and Path(str(config.get("output_dir"))).name == name


def _locked(directory: Path) -> int | None:
    """A descriptor of ``directory`` holding an exclusive lock on it, None when another holds one. Where the file
    system takes no locks, the descriptor alone (the lock only guards against a second process taking the run)."""
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        return None
    except OSError:
        pass
    return descriptor


def _is_locked(directory: Path) -> bool:
    descriptor = _locked(directory)
    if descriptor is None:
        return True
    os.close(descriptor)
    return False


def _hidden_sibling(output: Path, kind: str) -> Path:
    """A new, empty directory ``.<name>.<random>.<kind>`` beside ``output``, on its file system (so that a rename
    moves it), made as ``mkdir`` makes the output (tempfile's would be private to its owner)."""
    while True:
        sibling = output.parent / f".{output.name[:_STAGING_NAME]}.{secrets.token_hex(4)}.{kind}"
        try:
            sibling.mkdir()
        except FileExistsError:
            continue
        return sibling


def _remove_empty(directories: list[Path]) -> None:
    for directory in reversed(directories):
        try:
            directory.rmdir()
        except OSError:
            return


__all__ = ["INCOMPLETE_SUFFIX", "RUN_ENTRIES", "RunDirectory", "check_output", "interrupted_runs",
           "is_run_directory"]
