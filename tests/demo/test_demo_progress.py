"""``actlab demo``'s progress on stderr: every long stage has a bar with an ETA, and the output never stands
still for long (a bar at 2 s a training step, or a long evaluation episode, looked like a hang)."""

from __future__ import annotations

import io
import itertools
import re
import sys
import threading
import time

import pytest

from actlab.cli import main

pytest.importorskip("mujoco")

TOY = ["--episodes", "4", "--eval-episodes", "2", "--videos", "1", "--device", "cpu", "--workers", "1"]
TOY += [
    "--set",
    "checkpoint.every=10",
    "--set",
    "eval.every=10",
    "--set",
    "log.every=10",
    "--set",
    "steps=20",
]
# The longest stretch without a write to stderr that the test accepts. The bars redraw every TICK_S (1 s);
# what is not under a bar (building the training run after the frame cache, the training plot, writing the
# report) was measured at up to 10.8 s on 2 cores at a load average of 9-12 (this toy demo then ran 9.2 min,
# 6.9 s a training step): the bound leaves room for more load, and still fails a bar that moves once per
# logging window or per evaluation episode only (a minute and more at that load).
MAX_GAP_S = 20.0
# A tqdm line with a known total: "desc:  40%|####      | 2/5 [00:03<00:04, 1.5ep/s]"; the ETA is "<00:04".
BAR = re.compile(r"^(?P<desc>[^:\r\n]+?):\s+\d+%\|.*\| *\d+/\d+ \[(?P<elapsed>[\d:]+)<(?P<eta>[\d:?]+)")


class StampedStream(io.TextIOBase):
    """A text stream that keeps every write with the monotonic time it arrived."""

    def __init__(self) -> None:
        self.writes: list[tuple[float, str]] = []
        self._lock = threading.Lock()

    def write(self, s: str) -> int:
        with self._lock:
            self.writes.append((time.monotonic(), s))
        return len(s)

    def isatty(self) -> bool:
        return False

    def lines(self) -> list[tuple[float, str]]:
        """Every line or bar redraw (tqdm ends a redraw with \\r), with the time its last part arrived."""
        out, buf = [], ""
        for t, s in self.writes:
            for piece in re.split(r"([\r\n])", s):
                if piece in ("\r", "\n"):
                    if buf.strip():
                        out.append((t, buf.strip()))
                    buf = ""
                else:
                    buf += piece
        return out


@pytest.mark.slow
@pytest.mark.timeout(1200)  # a toy demo: 9.2 min on 2 cores at a load average of 9-12
def test_every_long_demo_stage_reports_progress_with_an_eta_and_never_stands_still(tmp_path, monkeypatch):
    stream = StampedStream()
    monkeypatch.setattr(sys, "stderr", stream)
    assert main(["demo", "--out", str(tmp_path / "demo"), *TOY]) == 0
    monkeypatch.undo()
    lines = stream.lines()
    text = "\n".join(line for _, line in lines)

    # The bars of each stage, by their names, each of which ends with an ETA (a number, not "?").
    stages: dict[str, list[str]] = {}
    stage = None
    for _, line in lines:
        m = re.match(r"\[(\d)/4\]", line)
        if m:
            stage = int(m.group(1))
        bar = BAR.match(line)
        if bar and stage is not None:
            stages.setdefault(str(stage), []).append(line)
    descs = {k: {BAR.match(line)["desc"].strip() for line in v} for k, v in stages.items()}
    assert "recording" in descs.get("1", set()), text
    assert {"decode", "train"} <= descs.get("2", set()), text
    assert {"sweep", "confirm"} <= descs.get("3", set()), text
    assert any(d.startswith("whiskers") for d in descs["3"]), text
    for k, bar_lines in stages.items():
        for desc in descs[k]:
            last = [line for line in bar_lines if BAR.match(line)["desc"].strip() == desc][-1]
            assert re.fullmatch(r"[\d:]+", BAR.match(last)["eta"]), (desc, last)
    # From the first stage line to the end, no stretch without output longer than MAX_GAP_S.
    first = next(i for i, (_, line) in enumerate(lines) if line.startswith("[1/4]"))
    times = [t for t, _ in lines[first:]]
    gaps = [
        (b - a, lines[first + i][1], lines[first + i + 1][1])
        for i, (a, b) in enumerate(itertools.pairwise(times))
    ]
    worst = max(gaps)
    assert worst[0] <= MAX_GAP_S, worst
