"""The monitor CSV's GPU columns and a monitored command on one line.

Shared by the printed summary (actlab.profiling.summary) and the plot (actlab.viz.monitor), which sit side
by side and do not import each other.
"""

from __future__ import annotations

import re
from collections.abc import Sequence


def gpu_count(columns: Sequence[str]) -> int:
    """How many GPUs a monitor CSV holds columns for."""
    return sum(1 for c in columns if re.fullmatch(r"gpu\d+_util_pct", c))


def short_command(command: str | None, limit: int = 100) -> str:
    """A command on one line, at most ``limit`` characters, for titles and summaries."""
    if not command:
        return "the command"
    one_line = " ".join(command.split())
    return one_line if len(one_line) <= limit else one_line[: limit - 3] + "..."
