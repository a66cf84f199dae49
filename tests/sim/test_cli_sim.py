import numpy as np
import pytest

from actlab.cli import main


def test_sim_view_writes_a_strip_of_both_cameras(tmp_path, capsys):
    from PIL import Image

    out = tmp_path / "strip.png"
    assert main(["sim", "view", "--out", str(out), "--image-size", "32", "--frames", "4"]) == 0
    img = np.asarray(Image.open(out))
    assert img.shape == (2 * 32 + 2, 4 * 32 + 3 * 2, 3)
    assert "success" in capsys.readouterr().out
    # The two rows differ (top and wrist cameras), and the frames over time differ.
    assert not np.array_equal(img[:32, :32], img[34:, :32])
    assert not np.array_equal(img[:32, :32], img[:32, -32:])


def test_sim_view_rejects_non_png(tmp_path, capsys):
    assert main(["sim", "view", "--out", str(tmp_path / "x.jpg")]) == 2
    assert "PNG" in capsys.readouterr().err


def test_sim_record_prints_summary(tmp_path, capsys):
    out = tmp_path / "ds"
    args = ["sim", "record", "--episodes", "1", "--out", str(out), "--image-size", "16", "--workers", "0"]
    assert main(args) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("recorded 1 episodes") and "expert success 1/1 (100.0%)" in line
    assert main(["data", "doctor", str(out)]) == 0


def test_sim_expert_reports_success_rate(capsys):
    assert main(["sim", "expert", "--episodes", "2", "--seed", "5"]) == 0
    assert "expert success 2/2" in capsys.readouterr().out


def test_view_upscale_repeats_the_rendered_pixels(tmp_path):
    from PIL import Image

    from actlab.sim.view import render_strip

    render_strip(tmp_path / "a.png", image_size=16, frames=2)
    render_strip(tmp_path / "b.png", image_size=16, frames=2, upscale=2)
    a, b = (np.asarray(Image.open(tmp_path / n)) for n in ("a.png", "b.png"))
    assert b.shape == (2 * a.shape[0], 2 * a.shape[1], 3)
    assert np.array_equal(b[::2, ::2], a)


def test_sim_expert_and_bench_refuse_zero_counts(capsys):
    with pytest.raises(SystemExit) as e:  # a count of 0: the parser's usage error, naming the option
        main(["sim", "expert", "--episodes", "0"])
    assert e.value.code == 2 and "--episodes: expected a number >= 1" in capsys.readouterr().err
    assert main(["sim", "bench", "--frames", "0"]) == 2
    assert "frames must be at least 2" in capsys.readouterr().err
