"""Property-based tests: the shipped run configs, mutated (keys dropped, values of other types, extreme numbers,
unicode, broken text), are either valid configs or one line naming what is wrong, never a traceback.

The examples are few and derandomized, so CI runs the same ones every time, in seconds: the configs are only
loaded (by the real loader, and by ``ppo-tune train`` up to the point where it would start), never trained.
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
from hypothesis import given
from hypothesis import strategies as st

from ppo_core.config.io import load_config
from ppo_core.config.ppo_config import ConfigError, PPOConfig
from ppo_tune.cli import main

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = [ROOT / "studies" / "train.yaml", ROOT / "examples" / "bring_your_own" / "train.yaml"]

EXTREME_NUMBERS = [0, -1, 1, 2**31, 2**63, -(2**63), 10**30, 1e308, -1e308, 5e-324, -0.0, math.inf, -math.inf,
                   math.nan]
# Text that YAML and argparse treat specially, and unicode beyond ASCII: a BOM, NUL, line and paragraph separators,
# NEL, right-to-left, combining marks, an emoji, a CJK character, and YAML's own indicators.
ODD_TEXT = ["", " ", "\ufeff", "\x00", "\u2028", "\u2029", "\x85", "\u202e", "e\u0301", "\U0001f600", "\u6587",
            "null", "~", "yes", "no", "0x1F", "1e999", "-.inf", ".nan", "&a", "*a", "!!python/object:os.system", "|",
            "%", "{", "[", "- ", ": ", "#"]

texts, values = value_strategies(ODD_TEXT, EXTREME_NUMBERS)


@st.composite
def mutated_mapping(draw: st.DrawFn, base: dict[str, Any]) -> dict[str, Any]:
    """``base`` with one to three of: a key dropped, a value replaced, a key added, a key renamed."""
    mapping = dict(base)
    for _ in range(draw(st.integers(1, 3))):
        keys = sorted(mapping, key=str)
        operation = draw(st.sampled_from(["drop", "replace", "add", "rename"] if keys else ["add"]))
        if operation == "add":
            mapping[draw(st.one_of(texts, st.sampled_from(sorted(PPOConfig.__dataclass_fields__))))] = draw(values)
            continue
        key = draw(st.sampled_from(keys))
        if operation == "drop":
            del mapping[key]
        elif operation == "replace":
            mapping[key] = draw(values)
        else:
            mapping[f"{key}{draw(texts)}"] = mapping.pop(key)
    return mapping


def check_outcome(content: bytes, suffix: str = ".yaml") -> None:
    """The real loader builds a config or raises ConfigError with one line; the command line exits 2 with one line
    (for a valid config too: it is stopped by its output directory, which holds a file, before anything starts)."""
    with tempfile.TemporaryDirectory() as directory:
        config_file = Path(directory) / f"run{suffix}"
        config_file.write_bytes(content)
        try:
            assert isinstance(load_config(config_file), PPOConfig)
        except ConfigError as error:
            message = str(error)
            assert message.strip() and "\n" not in message, repr(message)
        (Path(directory) / "notes.txt").write_text("the user's own file\n")
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            status = main(["train", str(config_file), "--output", directory, "--quiet"])
        line = stderr.getvalue().strip()
        assert status == 2, line
        assert line.startswith("ppo-tune train: error: ") and "\n" not in line, line
        assert sorted(p.name for p in Path(directory).iterdir()) == ["notes.txt", config_file.name]


@FUZZ
@given(st.sampled_from(SHIPPED).flatmap(lambda path: mutated_mapping(shipped_mapping(path))))
def test_mutated_shipped_configs_load_or_fail_in_one_line(mapping: dict[str, Any]) -> None:
    check_outcome(yaml.safe_dump(mapping, allow_unicode=True, sort_keys=False).encode("utf-8"))


@FUZZ
@given(st.sampled_from(SHIPPED).flatmap(lambda path: mutated_mapping(shipped_mapping(path))))
def test_mutated_shipped_configs_as_json_load_or_fail_in_one_line(mapping: dict[str, Any]) -> None:
    import json

    check_outcome(json.dumps(mapping, default=str).encode("utf-8"), suffix=".json")


@FUZZ
@given(st.sampled_from(SHIPPED).flatmap(lambda path: mangled_text(path.read_text(), texts)))
def test_shipped_config_text_mangled_loads_or_fails_in_one_line(content: bytes) -> None:
    check_outcome(content)


def test_the_shipped_configs_themselves_load() -> None:
    for path in SHIPPED:
        assert isinstance(load_config(path), PPOConfig)
