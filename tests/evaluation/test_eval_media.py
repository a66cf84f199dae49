"""Videos (real H.264 via PyAV), text overlay, the sweep plot, whiskers drawing and forecast exactness."""

from __future__ import annotations

import numpy as np
import pytest
from evalpolicies import expert_chunk_factory

from actlab.evaluation import EnvSpec, EvalConfig
from actlab.evaluation.results import CheckpointEval, EpisodeResult, summarize
from actlab.evaluation.video import (
    GREEN,
    RED,
    VIDEO_HOLD_S,
    annotate_episode,
    draw_text,
    pick_codec,
    read_video,
    side_by_side,
    write_video,
)
from actlab.evaluation.whiskers import WhiskerStyle, draw_whiskers, whiskers_video


def test_video_round_trip_keeps_frames_and_size(tmp_path):
    frames = [np.full((33, 47, 3), 10 * i, np.uint8) for i in range(12)]  # odd sizes: padded to even
    path = write_video(tmp_path / "v.mp4", frames, fps=30)
    out = read_video(path)
    assert pick_codec() in ("libx264", "h264", "mpeg4", "libsvtav1", "libaom-av1")
    assert len(out) == 12 and out[0].shape == (34, 48, 3)
    assert abs(int(out[5][10, 10, 0]) - 50) <= 3  # lossy, but the content is there


def test_failed_video_write_leaves_nothing(tmp_path):
    def frames():
        yield np.zeros((16, 16, 3), np.uint8)
        raise RuntimeError("renderer died")

    with pytest.raises(RuntimeError):
        write_video(tmp_path / "v.mp4", frames(), fps=30)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="size"):
        write_video(tmp_path / "w.mp4", [np.zeros((16, 16, 3), np.uint8), np.zeros((8, 8, 3), np.uint8)], 30)
    assert list(tmp_path.iterdir()) == []


def test_outcome_text_is_drawn_in_its_colour():
    frame = np.full((200, 300, 3), 128, np.uint8)
    (ok,) = annotate_episode([frame], "success", "ep 0")
    (bad,) = annotate_episode([frame], "dropped_during_transport", "ep 0")
    band_ok, band_bad = ok[-18:].reshape(-1, 3), bad[-18:].reshape(-1, 3)
    assert (np.abs(band_ok.astype(int) - GREEN).sum(1) < 60).sum() > 20
    assert (np.abs(band_bad.astype(int) - RED).sum(1) < 60).sum() > 20
    assert ok[:18].max() == 255 and ok[:18].mean() < 60  # white header text on a black band
    assert draw_text(frame).shape == frame.shape and side_by_side([frame, frame[:100, :150]]).shape == (
        200,
        600,
        3,
    )


def _band_has(frame: np.ndarray, color) -> bool:
    """The bottom text band of a video frame carries text in ``color``."""
    band = frame[-18:].reshape(-1, 3).astype(int)
    return (np.abs(band - color).sum(1) < 60).sum() > 20


def test_success_is_stamped_from_the_step_the_env_reports_it_and_the_end_is_held():
    frames = [np.full((200, 300, 3), 128, np.uint8) for _ in range(5)]  # initial + 4 steps
    out = annotate_episode(frames, "success", "ep 0", 4, success=[False, False, True, True], hold=3)
    assert len(out) == 5 + 3
    assert [_band_has(f, GREEN) for f in out] == [False, False, False, True, True, True, True, True]
    failed = annotate_episode(frames, "timeout", "ep 1", 4, success=[False] * 4, hold=2)
    assert [_band_has(f, RED) for f in failed] == [False] * 4 + [True] * 3  # known once it has ended
    assert not any(_band_has(f, GREEN) for f in failed)


def test_whisker_colours_land_on_the_frame():
    frame = np.full((100, 100, 3), 200, np.uint8)
    preds = [np.array([[10.0, 10.0], [90.0, 10.0]]), np.array([[10.0, 50.0], [90.0, 50.0], [np.nan, np.nan]])]
    actual = np.array([[10.0, 90.0], [90.0, 90.0]])
    out = draw_whiskers(frame, preds, actual, WhiskerStyle(history=4, size=100))
    assert tuple(out[50, 50]) == (40, 255, 40)  # current prediction: opaque bright green
    assert tuple(out[90, 50]) == (255, 0, 255)  # actual path: magenta
    faded = out[10, 50].astype(int)
    assert faded[1] > faded[0] and tuple(faded) != (40, 255, 40)  # older prediction: blended, fading


def test_sweep_plot(tmp_path):
    from PIL import Image

    from actlab.viz.eval import CONFIRM_COLOR, SWEEP_COLOR, plot_success_vs_step

    def ev(step, k):
        eps = [
            EpisodeResult(i, i, "success" if i < k else "missed_goal", i < k, 100, True, 0, None, 0.05, 0.0)
            for i in range(10)
        ]
        return CheckpointEval(f"step_{step}", None, step, summarize(eps), eps)

    path = plot_success_vs_step([ev(3000, 9), ev(1000, 2), ev(2000, 6)], tmp_path / "p.png")
    img = Image.open(path)
    assert img.format == "PNG" and img.size[0] >= 600

    # The chosen checkpoint on fresh seeds is drawn beside the sweep in its own colour (and only then).
    def has(color_hex: str, png) -> int:
        rgb = np.asarray(Image.open(png).convert("RGB")).reshape(-1, 3).astype(int)
        want = np.array([int(color_hex[i : i + 2], 16) for i in (1, 3, 5)])
        return int((np.abs(rgb - want).sum(1) < 30).sum())

    confirmed = plot_success_vs_step([ev(1000, 2), ev(2000, 6)], tmp_path / "c.png", confirm=ev(2000, 5))
    assert has(CONFIRM_COLOR, confirmed) > 100 and has(CONFIRM_COLOR, path) == 0
    assert has(SWEEP_COLOR, confirmed) > 100

    # A task's own failure class (so101_push's missed_zone) is drawn in the failure stack too: it was left
    # out, so a push sweep's failures did not show.
    from actlab.viz.eval import TASK_FAILURE_COLORS

    def push(step, k):
        eps = [
            EpisodeResult(i, i, "success" if i < k else "missed_zone", i < k, 100, False, 0, None, 0.0, 0.0)
            for i in range(10)
        ]
        return CheckpointEval(f"step_{step}", None, step, summarize(eps), eps)

    pushed = plot_success_vs_step([push(1000, 2), push(2000, 6)], tmp_path / "push.png")
    assert has(TASK_FAILURE_COLORS[0], pushed) > 100 and has(TASK_FAILURE_COLORS[0], path) == 0


def test_whiskers_forecast_is_exact_when_the_first_action_is_executed(tmp_path, capsys):
    pytest.importorskip("mujoco")
    # The expert as a chunking policy executes exactly each predicted chunk's first action, so the
    # forward simulation from a copied state must land where the real step lands: error 0.
    info = whiskers_video(
        expert_chunk_factory,
        EnvSpec("so101_pick_place", cameras=(), max_steps=60),
        EvalConfig(episodes=1, workers=1),
        tmp_path / "w.mp4",
        every=5,
        style=WhiskerStyle(size=128),
    )
    assert info["first_step_error_m"] == 0.0
    assert info["steps"] == 60 and info["predictions"] == 12
    # Its progress is shown (it ran silently after the evaluation's bar, 10-40 s).
    assert "whiskers (" in capsys.readouterr().err
    frames = read_video(tmp_path / "w.mp4")
    assert len(frames) == 61 + round(VIDEO_HOLD_S * 30) and frames[0].shape == (128, 128, 3)  # + held end
    # The lossless still for reports, written beside the video: one of the video's frames.
    from PIL import Image

    assert info["still"] == str(tmp_path / "w.png")
    still = np.asarray(Image.open(tmp_path / "w.png")).astype(int)
    assert still.shape == (128, 128, 3)
    assert min(np.abs(still - f.astype(int)).mean() for f in frames) < 8  # codec tolerance


def test_telling_frame_is_the_one_with_the_longest_prediction():
    from actlab.evaluation.whiskers import _telling_frame

    short = np.zeros((4, 3))
    long = np.array([[0, 0, 0], [0.1, 0, 0], [0.2, 0, 0], [0.3, 0, 0]])
    # frames 0-1 show prediction 0 (short), frames 2-4 prediction 1 (long), frame 5 prediction 2 (short)
    assert _telling_frame([0, 0, 1, 1, 1, 2], [short, long, short]) == 2
