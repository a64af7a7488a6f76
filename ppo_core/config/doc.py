"""The config reference of docs/reference.md, generated from PPOConfig so the two cannot drift apart.

    python -m ppo_core.config.doc   # prints the markdown table
"""

from __future__ import annotations

import dataclasses

from ppo_core.config.checks import describe_field
from ppo_core.config.ppo_config import PPOConfig, settable_fields

BEGIN = "<!-- config-reference:begin -->"
END = "<!-- config-reference:end -->"


def reference_table() -> str:
    lines = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for name, config_field in settable_fields().items():
        default = config_field.default
        if default is dataclasses.MISSING and config_field.default_factory is not dataclasses.MISSING:
            default = config_field.default_factory()
        shown = "null" if default is None else ("" if default is dataclasses.MISSING else _shown(default))
        help_text = config_field.metadata["help"].replace("|", "\\|")
        lines.append(f"| `{name}` | {describe_field(PPOConfig, name)} | `{shown}` | {help_text} |")
    derived = [f.name for f in dataclasses.fields(PPOConfig) if not f.init]
    lines.append("")
    lines.append("Derived, as TRL computes them: " + ", ".join(f"`{name}`" for name in derived) + ".")
    return "\n".join(lines)


def _shown(value: object) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_shown(item) for item in value) + "]"
    return f"{value!r}".strip("'")


def reference_block() -> str:
    return f"{BEGIN}\n{reference_table()}\n{END}"


if __name__ == "__main__":
    print(reference_block())
