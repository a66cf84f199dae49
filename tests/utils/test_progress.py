"""Progress bars that redraw while nothing moves (a long training step, a long episode)."""

from __future__ import annotations

import io
import threading

import pytest

from actlab.utils.progress import TickingBar


class _Stream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.redraws = threading.Semaphore(0)

    def write(self, s: str) -> int:
        if "\r" in s:
            self.redraws.release()
        return super().write(s)


@pytest.mark.timeout(60)
def test_a_bar_that_does_not_move_is_redrawn_by_its_ticker_and_the_ticker_stops_on_close():
    stream = _Stream()
    bar = TickingBar(total=4, desc="x", unit="ep", file=stream, tick_s=0.01)
    bar.update(1)
    for _ in range(5):  # five redraws with no update in between (no wall-clock wait: the writes signal)
        stream.redraws.acquire()
    bar.close()
    assert not bar._ticker.is_alive()
    assert "1/4" in stream.getvalue() and stream.getvalue().count("x:") >= 5


def test_a_disabled_bar_has_no_ticker():
    bar = TickingBar(total=4, disable=True)
    assert bar._ticker is None
    bar.close()
