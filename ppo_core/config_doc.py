"""The old path of :mod:`ppo_core.config.doc`, kept for one release: ``python -m ppo_core.config_doc`` still prints
the config reference."""

from __future__ import annotations

from ppo_core.config.doc import BEGIN, END, reference_block, reference_table

__all__ = ["BEGIN", "END", "reference_block", "reference_table"]

if __name__ == "__main__":
    print(reference_block())
