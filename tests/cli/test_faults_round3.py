"""Faults of the third planted-fault run (issue 36; docs/faults.md), planted for real: real datasets,
real files, the real parser and commands.

- every command that adds files to a directory follows the output-marker rule (``data view``): a
  directory holding a user's files, another command's output, or the dataset itself is refused before a
  byte is written;
- every numeric option of every command refuses nan, inf, -1 and 10**12 at parse time, naming the option,
  so nothing runs and nothing is written;
- a training resume whose dataset was replaced by another recording under the same path is refused,
  naming what changed.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from actlab.cli import main
from actlab.utils.io import OUTPUT_MARKER, read_output_marker


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------------------------- output marker


@pytest.mark.timeout(120)
def test_data_view_never_writes_over_a_users_files(tiny_dataset, tmp_path, capsys):
    """LOSS before: episode_000.html and report.md of the user's were overwritten by data view."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / "episode_000.html").write_text("my page")
    (out / "report.md").write_text("my notes")
    before = _tree(out)
    assert main(["data", "view", str(tiny_dataset), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(out) in err and "episode_000.html" in err and "choose another --out" in err
    assert _tree(out) == before


@pytest.mark.timeout(120)
@pytest.mark.parametrize("where", [".", "meta", "videos/new"])
def test_data_view_refuses_the_dataset_itself(tiny_dataset, tmp_path, capsys, where):
    ds = tmp_path / "ds"
    shutil.copytree(tiny_dataset, ds)
    before = _tree(ds)
    assert main(["data", "view", str(ds), "--out", str(ds / where)]) == 2
    err = capsys.readouterr().err
    assert "input" in err and str(ds) in err
    assert _tree(ds) == before and not (ds / "videos/new").exists()


@pytest.mark.timeout(120)
def test_data_view_adds_pages_to_its_own_directory_and_refuses_another_commands(
    tiny_dataset, tmp_path, capsys
):
    out = tmp_path / "view"
    assert main(["data", "view", str(tiny_dataset), "--episode", "0", "--out", str(out)]) == 0
    assert read_output_marker(out)["kind"] == "actlab data view"
    assert main(["data", "view", str(tiny_dataset), "--episode", "1", "--out", str(out)]) == 0
    assert (out / "episode_000.html").is_file() and (out / "episode_001.html").is_file()
    # another command's output (a marker of another kind) is not data view's to write into
    other = tmp_path / "other"
    other.mkdir()
    (other / OUTPUT_MARKER).write_text('{"kind": "actlab eval", "token": "x"}')
    capsys.readouterr()
    assert main(["data", "view", str(tiny_dataset), "--out", str(other)]) == 2
    assert "actlab eval" in capsys.readouterr().err
    assert sorted(p.name for p in other.iterdir()) == [OUTPUT_MARKER]
