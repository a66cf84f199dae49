"""`actlab data view`: one episode as a page (video stretch, filmstrip, curves) from a real dataset."""

from __future__ import annotations

import re

from actlab.cli import main


def test_an_episode_page_has_its_video_stretch_filmstrip_and_curves(tiny_dataset, tmp_path, capsys):
    out = tmp_path / "view"
    assert main(["data", "view", str(tiny_dataset), "--episode", "1", "--out", str(out)]) == 0
    assert "episode_001.html" in capsys.readouterr().out
    html = (out / "episode_001.html").read_text()
    # The episode's part of the dataset's own video: episode 1 of 40-frame episodes at 30 fps.
    (src,) = re.findall(r'<video[^>]* src="([^"]+)"', html)
    path, frag = src.split("#t=")
    assert (out / path).resolve().is_file() and frag == "1.333,2.667"
    for png in ("episode_001_frames.png", "episode_001_curves.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f'src="{png}"' in html
    assert "40 frames" in (out / "episode_001.md").read_text()
    assert main(["data", "view", str(tiny_dataset), "--episode", "9", "--out", str(out)]) == 2
    assert "no such episode" in capsys.readouterr().err
