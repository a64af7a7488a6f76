"""Property-based tests: the shipped study files, mutated (keys dropped anywhere in them, values of other types,
extreme numbers, unicode, mangled text), are either valid study definitions or one line naming what is wrong, never
a traceback, and nothing is created for them.

The examples are few and derandomized, so CI runs the same ones every time, in seconds: the files are read by the
real loader, and by ``ppo-tune run`` up to the point where it would open its storage (a file that is not a database,
which stops a valid study with a line of its own), never run.
"""

from __future__ import annotations

import contextlib
import io
import math
import tempfile
from pathlib import Path
from typing import Any

import yaml
from helpers.fuzz_strategies import FUZZ, mangled_text, shipped_mapping, value_strategies
from helpers.studies import shipped_study_files
from hypothesis import given
from hypothesis import strategies as st

from ppo_core.errors import InputError, first_line
from ppo_tune.cli import main
from tuner.store.database import sqlite_path
from tuner.study.study_file import StudySpec, load_study_spec

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = shipped_study_files()
NOT_A_DATABASE = b"not a database\n" * 64

EXTREME_NUMBERS = [0, -1, 1, 2**31, 2**32, 2**63, -(2**63), 10**30, 1e308, -1e308, 5e-324, -0.0, math.inf,
                   -math.inf, math.nan]
# Unicode beyond ASCII (a BOM, NUL, separators, right-to-left, combining marks, an emoji, CJK), YAML's own specials,
# and what a study name turns into as a file name (a path separator, dot-dot).
ODD_TEXT = ["", " ", "\ufeff", "\x00", "\u2028", "\x85", "\u202e", "e\u0301", "\U0001f600", "\u6587", "null", "~",
            "yes", "1e999", ".nan", "&a", "*a", "!!python/object:os.system", "%", "{", "- ", ": ", "#", "a/b", "..",
            "x" * 300, "sqlite:///", "postgresql://", "foo://bar"]

texts, values = value_strategies(ODD_TEXT, EXTREME_NUMBERS)

Path_ = tuple[Any, ...]


def _places(node: Any, where: Path_ = ()) -> list[Path_]:
    """Every key of every mapping and every index of every list in ``node``, as paths from its root."""
    places: list[Path_] = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for key, child in items:
        places.append((*where, key))
        places.extend(_places(child, (*where, key)))
    return places


def _parent(root: Any, where: Path_) -> Any:
    for key in where[:-1]:
        root = root[key]
    return root


@st.composite
def mutated_study(draw: st.DrawFn, study: dict[str, Any]) -> dict[str, Any]:
    """``study`` with one to three of, anywhere in it: a key or item dropped, a value replaced, a key added (in a
    mapping), a key renamed."""
    study = yaml.safe_load(yaml.safe_dump(study))  # a deep copy
    for _ in range(draw(st.integers(1, 3))):
        places = sorted(_places(study), key=repr)
        if not places:
            study[draw(texts)] = draw(values)
            continue
        where = draw(st.sampled_from(places))
        parent, key = _parent(study, where), where[-1]
        operation = draw(st.sampled_from(["drop", "replace", "add", "rename"]))
        if operation == "drop":
            del parent[key]
        elif operation == "replace":
            parent[key] = draw(values)
        elif isinstance(parent, dict) and operation == "add":
            parent[draw(texts)] = draw(values)
        elif isinstance(parent, dict):
            parent[f"{key}{draw(texts)}"] = parent.pop(key)
    return study


def check_outcome(content: bytes) -> None:
    """The real loader gives a study or one line; ``ppo-tune run`` exits 2 with one line, and creates nothing."""
    with tempfile.TemporaryDirectory() as directory:
        study_file = Path(directory) / "study.yaml"
        study_file.write_bytes(content)
        corrupt = Path(directory) / "corrupt.db"
        corrupt.write_bytes(NOT_A_DATABASE)
        spec: StudySpec | None = None
        try:
            spec = load_study_spec(study_file)
        except InputError as error:
            expected = first_line(error)
            assert str(error).strip() and "\n" not in str(error), repr(str(error))
        if spec is not None:
            assert spec.search_space and spec.objectives
            database = sqlite_path(spec.storage)
            if "storage" not in spec.mapping:  # the default: a file beside the study file, never elsewhere
                assert database is not None and database.parent == Path(directory).resolve(), spec.storage
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            status = main(["run", str(study_file), "--storage", f"sqlite:///{corrupt}"])
        line = stderr.getvalue().strip()
        assert status == 2, line
        assert line.startswith("ppo-tune run: error: ") and "\n" not in line, line
        if spec is None:
            assert line == f"ppo-tune run: error: {expected}"
        assert sorted(p.name for p in Path(directory).iterdir()) == ["corrupt.db", "study.yaml"]
        assert corrupt.read_bytes() == NOT_A_DATABASE


@FUZZ
@given(st.sampled_from(SHIPPED).flatmap(lambda path: mutated_study(shipped_mapping(path))))
def test_mutated_shipped_studies_load_or_fail_in_one_line(study: dict[str, Any]) -> None:
    check_outcome(yaml.safe_dump(study, allow_unicode=True, sort_keys=False).encode("utf-8"))


@FUZZ
@given(st.sampled_from(SHIPPED).flatmap(lambda path: mangled_text(path.read_text(), texts)))
def test_shipped_study_text_mangled_loads_or_fails_in_one_line(content: bytes) -> None:
    check_outcome(content)


def test_the_shipped_studies_themselves_stop_only_at_the_storage() -> None:
    for path in SHIPPED:
        check_outcome(path.read_bytes())


def test_a_base_estimator_that_is_not_a_name_is_one_line() -> None:
    # Regression, found by the mutation test above: a list in base.advantage_estimator reached the reading of the
    # search space's regimes as a bare KeyError ('[]').
    (path,) = [path for path in SHIPPED if path.name == "text.yaml"]  # a GRPO study of the text task
    study = shipped_mapping(path)
    study["base"]["advantage_estimator"] = []
    check_outcome(yaml.safe_dump(study, sort_keys=False).encode("utf-8"))
