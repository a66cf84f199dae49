"""Progress bars that keep moving on a busy machine.

A tqdm bar is drawn only when it is updated: a training step that takes 2 s on a loaded CPU, an
evaluation episode of 10 s, or a checkpoint write between two updates left the bar still for as long,
which looks like a hang. :func:`progress_bar` returns a tqdm bar with a ticker thread that redraws it
every :data:`TICK_S` seconds (elapsed time, rate and the ETA, ``<mm:ss``), whether or not it moved.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from tqdm import tqdm

# Seconds between two redraws of a bar that did not move. A bar on a file (a CI log) gets a line per
# redraw; one a second over a five-minute demo is ~300 short lines.
TICK_S = 1.0
# Redraws caused by updates are at most this often (tqdm's own throttle; tqdm's default is 0.1 s).
MIN_INTERVAL_S = 0.5


class TickingBar(tqdm):
    """tqdm with a daemon thread that calls ``refresh()`` every ``tick_s`` seconds until ``close()``."""

    def __init__(self, *args: Any, tick_s: float = TICK_S, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        if not self.disable and tick_s > 0:
            self._ticker = threading.Thread(target=self._tick, args=(tick_s,), name="progress", daemon=True)
            self._ticker.start()

    def _tick(self, tick_s: float) -> None:
        while not self._stop.wait(tick_s):
            try:
                self.refresh()
            except (ValueError, OSError):  # the stream was closed under the bar: stop redrawing
                return

    def close(self) -> None:
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop.set()
            if self._ticker is not None and self._ticker is not threading.current_thread():
                self._ticker.join()
        super().close()


def progress_bar(
    total: int | None,
    desc: str,
    unit: str,
    *,
    initial: int = 0,
    disable: bool = False,
    leave: bool = True,
    file: Any = None,
) -> TickingBar:
    """A bar on stderr (or ``file``) over ``total`` items, redrawn at least every second."""
    return TickingBar(
        total=total,
        initial=initial,
        desc=desc,
        unit=unit,
        disable=disable,
        leave=leave,
        file=file if file is not None else sys.stderr,
        dynamic_ncols=True,
        mininterval=MIN_INTERVAL_S,
    )
