"""Building a PPOConfig from YAML/JSON files and ``key=value`` overrides, with one-line errors."""

from __future__ import annotations

import difflib
import json
import re
import typing
from pathlib import Path
from typing import Any

import yaml

from ppo_core.config.ppo_config import ConfigError, PPOConfig, field_types, settable_fields
from ppo_core.errors import first_line

# PyYAML follows YAML 1.1, where "1e-5" (no dot) is a string; users write it that way anyway.
_FLOAT_TEXT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in one mapping is an error: PyYAML keeps the last."""


class _DuplicateKey(Exception):
    def __init__(self, key: Any, line: int | None = None) -> None:
        super().__init__(key)
        self.key = key
        self.where = f" (line {line})" if line is not None else ""


def _construct_unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            duplicate = key in seen
            seen.add(key)
        except TypeError:  # an unhashable key (a list): PyYAML's own construct_mapping names it
            continue
        if duplicate:
            raise _DuplicateKey(key, key_node.start_mark.line + 1)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


def _unique_json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    mapping: dict[str, Any] = {}
    for key, value in pairs:
        if key in mapping:
            raise _DuplicateKey(key)
        mapping[key] = value
    return mapping


def read_mapping(path: str | Path, what: str = "config") -> dict[str, Any]:
    """A YAML or JSON file holding a non-empty mapping, each key once; ConfigError when it is missing, not text,
    malformed or empty (every field has a default, so an empty file would start a run nobody asked for)."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"{what}: no such file {str(path)!r}")
    try:
        text = file.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"{what}: {str(path)!r} is not UTF-8 text (byte {error.object[error.start]:#04x} at "
                          f"offset {error.start}); give a YAML or JSON file") from None
    try:
        data = json.loads(text, object_pairs_hook=_unique_json_object) if file.suffix == ".json" \
            else yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader, with unique keys
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        first = first_line(error)
        raise ConfigError(f"{what}: {str(path)!r} is not valid {file.suffix.lstrip('.') or 'YAML'} ({first})") \
            from None
    except RecursionError:
        raise ConfigError(f"{what}: {str(path)!r} is nested too deeply to be a config") from None
    except _DuplicateKey as duplicate:
        raise ConfigError(f"{duplicate.key}: given twice in {str(path)!r}{duplicate.where}; keep one") from None
    if data is None or data == {}:
        raise ConfigError(f"{what}: {str(path)!r} is empty; set at least one field (docs/reference.md's config "
                          f"reference lists them)")
    if not isinstance(data, dict):
        raise ConfigError(f"{what}: {str(path)!r} must hold a mapping of field: value")
    return data


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """``["kl_coef=0.1", "task=null"]`` -> ``{"kl_coef": 0.1, "task": None}``; values are parsed as YAML."""
    overrides: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set: expected key=value, got {pair!r}")
        try:
            overrides[key.strip()] = yaml.safe_load(text) if text.strip() else None
        except yaml.YAMLError:
            overrides[key.strip()] = text
    return overrides


def check_known_keys(values: dict[str, Any]) -> None:
    """Reject keys PPOConfig lacks, suggesting the nearest field name."""
    known = settable_fields()
    for key in values:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{key}: unknown config key{hint}")


def _coerce_float_text(values: dict[str, Any]) -> dict[str, Any]:
    hints = field_types()
    coerced = dict(values)
    for key, value in values.items():
        if isinstance(value, str) and float in (*typing.get_args(hints[key]), hints[key]) \
                and _FLOAT_TEXT.match(value.strip()):
            coerced[key] = float(value)
        elif isinstance(value, list) and "list[list[float]]" in str(hints[key]):  # a schedule's [update, value]
            coerced[key] = [[_float_text(item) for item in pair] if isinstance(pair, list) else pair
                            for pair in value]
    return coerced


def _float_text(value: Any) -> Any:
    return float(value) if isinstance(value, str) and _FLOAT_TEXT.match(value.strip()) else value


def build_config(values: dict[str, Any]) -> PPOConfig:
    """Validate and build a PPOConfig from a plain mapping: what ``HfArgumentParser(PPOConfig).parse_dict(values)``
    builds (it passes the dataclass's fields to its constructor, whose checks name the field), with a hint for an
    unknown key and YAML 1.1's float text ("1e-5") read as a float.

    Built here rather than through the parser because the parser is transformers', and every tuner process (each
    worker, each ``ppo-tune run``) builds configs without otherwise loading transformers: a second of CPU to start
    each. tests/test_ppo_core/test_config.py holds the two to the same configs and the same refusals.
    """
    check_known_keys(values)
    return PPOConfig(**_coerce_float_text(values))


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> PPOConfig:
    """The config in ``path`` (YAML or JSON), with ``key=value`` overrides applied on top."""
    values = read_mapping(path) if path is not None else {}
    values.update(parse_overrides(overrides or []))
    return build_config(values)


def dump_config(config: PPOConfig, path: str | Path) -> None:
    """Write the resolved config as YAML, readable back by :func:`load_config`."""
    Path(path).write_text(yaml.safe_dump(config.to_dict(), sort_keys=False), encoding="utf-8")
