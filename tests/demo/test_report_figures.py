"""The demo report's figures from one source: the steady step time, the busy machine, the video previews."""

from __future__ import annotations

import numpy as np
import pytest

from actlab.demo.report import busy_sentence, step_time_breakdown
from actlab.viz.report import Report
from actlab.viz.training import step_time_top


def _rows(step_ms: list[float], batch: int = 32, load: float | None = None) -> list[dict]:
    rows = []
    for i, ms in enumerate(step_ms):
        t = ms / 1000
        row = {"step": 50 * (i + 1), "time_step_s": t, "time_data_s": 0.02 * t, "time_fwd_bwd_s": 0.9 * t}
        row |= {"time_optim_s": 0.08 * t, "samples_per_s": batch / t}
        if load is not None:
            row["load_avg_1m"] = load + i
        rows.append(row)
    return rows


def test_step_time_and_samples_per_s_agree_and_busy_windows_are_apart():
    # The demo's report said "124.3 ms per step, 588 samples/s" at batch 32: a mean step time pulled up by
    # windows slowed down by other work, next to a mean rate pulled up by the fast ones.
    rows = _rows([300, 50, 52, 48, 50, 51, 2400, 1500, 49], load=2.0)
    t = step_time_breakdown(rows, batch_size=32)
    assert t["time_step_s"] == pytest.approx(0.05, rel=0.03)
    assert t["samples_per_s"] == pytest.approx(32 / t["time_step_s"])
    parts = t["time_data_s"] + t["time_fwd_bwd_s"] + t["time_optim_s"]
    assert parts == pytest.approx(t["time_step_s"])
    assert (t["windows"], t["slow_windows"], t["slowest_step_s"]) == (8, 2, 2.4)
    assert t["max_load_avg_1m"] == 10.0
    said = busy_sentence(t)
    assert "2 of 8 logged windows took 3x or more" in said and "up to 2,400 ms" in said and "10.0" in said


def test_a_quiet_run_says_nothing_about_a_busy_machine():
    t = step_time_breakdown(_rows([300, 50, 55, 60, 52]), batch_size=32)
    assert t["slow_windows"] == 0 and busy_sentence(t) == ""


def test_the_step_time_axis_is_scaled_to_the_steady_windows():
    total = np.array([300.0, 50, 52, 48, 50, 2400, 1500, 49])
    assert step_time_top(total) == pytest.approx(1.5 * 52)
    assert step_time_top(np.array([50.0, 52, 55, 60])) is None  # nothing off the scale: autoscale


def test_a_video_is_previewed_by_its_last_frame(tmp_path):
    from PIL import Image

    from actlab.evaluation.video import read_video, write_last_frame, write_video

    frames = [np.full((32, 48, 3), 40 * i, np.uint8) for i in range(5)]
    write_video(tmp_path / "v.mp4", frames, fps=10)
    write_last_frame(tmp_path / "v.mp4", tmp_path / "v.last.png")
    poster = np.asarray(Image.open(tmp_path / "v.last.png"))
    assert np.array_equal(poster, read_video(tmp_path / "v.mp4")[-1])
    r = Report("t")
    r.video("v.mp4", "episode 3: missed goal", poster="v.last.png")
    assert 'poster="v.last.png" src="v.mp4"' in r.to_html()
    assert "[![episode 3: missed goal](v.last.png)](v.mp4)" in r.to_markdown()
