"""Error messages stay on one line, whatever a user's keys, names and paths hold."""

from __future__ import annotations

LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
"""Every character ``str.splitlines`` breaks a line at."""


def one_line(text: str) -> str:
    """``text`` with each line break written as its escape (``\\n``), so that a key read from a file as ``"a\\nb"``
    shows in an error as ``a\\nb`` on the one line a user reads, not as the start of a second one.

    Example::

        one_line("base.a\\nb: unknown config key")  # 'base.a\\\\nb: unknown config key'
    """
    return "".join(repr(char)[1:-1] if char in LINE_BREAKS else char for char in text)
