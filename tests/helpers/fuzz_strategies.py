"""What the fuzz tests of run configs and study files share: the settings that keep CI's examples few and fixed, the
value strategies built from each file's own odd text and extreme numbers, and the mangling of a file's raw text."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# Derandomized: CI draws the same examples every run.
FUZZ = settings(max_examples=40, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])


def value_strategies(odd_text: Sequence[str], extreme_numbers: Sequence[float]) -> tuple[Any, Any]:
    """``(texts, values)``: odd or arbitrary text, and any YAML value (scalars, short lists and mappings) built from
    it, the extreme numbers and arbitrary ones."""
    texts = st.one_of(st.sampled_from(list(odd_text)),
                      st.text(st.characters(exclude_categories=["Cs"]), max_size=12))
    scalars = st.one_of(st.none(), st.booleans(), st.sampled_from(list(extreme_numbers)), st.integers(),
                        st.floats(allow_nan=True, allow_infinity=True), texts)
    values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                             st.dictionaries(texts, inner, max_size=3)),
                          max_leaves=6)
    return texts, values


@st.composite
def mangled_text(draw: st.DrawFn, text: str, texts: Any) -> bytes:
    """``text`` with one of ``texts`` inserted somewhere, a line repeated (a key given twice) or cut short, and
    encoded as UTF-8 or, now and then, as something else."""
    lines = text.splitlines(keepends=True)
    operation = draw(st.sampled_from(["insert", "repeat", "cut"]))
    if operation == "insert":
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(texts) + text[at:]
    elif operation == "repeat":
        at = draw(st.integers(0, len(lines) - 1))
        text = "".join([*lines[: at + 1], lines[at], *lines[at + 1:]])
    else:
        text = text[: draw(st.integers(0, len(text)))]
    encoding = draw(st.sampled_from(["utf-8", "utf-8", "utf-8", "utf-16", "latin-1"]))
    return text.encode(encoding, errors="replace")


def shipped_mapping(path: Path) -> dict[str, Any]:
    """A shipped YAML file (a run config or a study), as the mapping the mutations start from."""
    mapping = yaml.safe_load(path.read_text())
    assert isinstance(mapping, dict), path
    return mapping
