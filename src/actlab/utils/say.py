"""Notes and warnings for the user on stderr, each line said once within a scope.

A command can run several evaluations of the same policies: the real-time sweep one a cell, the checkpoint
sweep a second pass that films, ``rl report`` one a seed. Each evaluation says what it found about its
inputs (a bundle trained on another task, the thread count a busy CPU gets, a horizon the executor
chose), and a 5-mode x 3-delay sweep printed the same warning 15 times. Within :func:`said_once` (every
``actlab`` command runs in one) a line already said is not said again; outside one, every line is said.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TextIO

_SAID: ContextVar[set[str] | None] = ContextVar("actlab_said", default=None)


@contextmanager
def said_once() -> Iterator[None]:
    """A scope in which :func:`say` says each line once (a scope inside another shares the outer one's)."""
    outer = _SAID.get()
    token = _SAID.set(set() if outer is None else outer)
    try:
        yield
    finally:
        _SAID.reset(token)


def say(line: str, file: TextIO | None = None) -> None:
    """Print ``line`` to ``file`` (stderr), unless the current :func:`said_once` scope already said it."""
    said = _SAID.get()
    if said is not None:
        if line in said:
            return
        said.add(line)
    print(line, file=sys.stderr if file is None else file)
