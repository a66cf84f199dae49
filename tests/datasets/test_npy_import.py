"""The .npy episode format -> LeRobot v3: both observation layouts, checks, no unsafe unpickling."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from actlab.cli import main
from actlab.datasets import open_dataset
from actlab.datasets.npy_import import load_npy
from actlab.errors import ActlabError


def _source(root, layout="records", lengths=(12, 8), chw_float=False):
    root.mkdir(parents=True, exist_ok=True)
    t = sum(lengths)
    rng = np.random.default_rng(0)
    left = rng.integers(0, 255, (t, 16, 24, 3), dtype=np.uint8)
    right = rng.integers(0, 255, (t, 16, 24, 3), dtype=np.uint8)
    state = rng.normal(size=(t, 4)).astype(np.float32)
    if chw_float:
        left = left.transpose(0, 3, 1, 2) / 255.0
    if layout == "records":
        obs = np.empty(t, dtype=object)
        for i in range(t):
            obs[i] = {"image_left": left[i], "image_right": right[i], "state": state[i]}
    else:
        obs = {"image_left": left, "image_right": right, "state": state}
    np.save(root / "observations.npy", obs, allow_pickle=True)
    np.save(root / "actions.npy", rng.normal(size=(t, 4)).astype(np.float32))
    np.save(root / "rollout_length.npy", np.array(lengths))
    return state


@pytest.mark.parametrize("layout", ["records", "columns"])
def test_convert_both_layouts(tmp_path, layout, capsys):
    state = _source(tmp_path / "src", layout)
    assert (
        main(["data", "convert", str(tmp_path / "src"), "--out", str(tmp_path / "out"), "--task", "t"]) == 0
    )
    ds = open_dataset(tmp_path / "out")
    assert [e.length for e in ds.episodes] == [12, 8]
    assert ds.camera_keys == ["observation.images.left", "observation.images.right"]
    assert np.array_equal(ds.column("observation.state"), state)
    assert ds.tasks == ["t"]


def test_chw_float_images_are_converted(tmp_path):
    _source(tmp_path / "src", "columns", chw_float=True)
    assert main(["data", "convert", str(tmp_path / "src"), "--out", str(tmp_path / "out")]) == 0
    assert open_dataset(tmp_path / "out").features["observation.images.left"]["shape"] == [16, 24, 3]


def test_lengths_must_add_up_and_nothing_is_written(tmp_path, capsys):
    _source(tmp_path / "src", lengths=(12, 8))
    np.save(tmp_path / "src/rollout_length.npy", np.array([12, 9]))
    assert main(["data", "convert", str(tmp_path / "src"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "rollout lengths do not add up" in err and "sum 21" in err
    assert not (tmp_path / "out").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]


class _Evil:
    def __reduce__(self):
        return (print, ("this must never run",))


def test_pickled_code_is_refused(tmp_path, capsys):
    path = tmp_path / "observations.npy"
    arr = np.empty(1, dtype=object)
    arr[0] = {"state": _Evil()}
    np.save(path, arr, allow_pickle=True)
    with pytest.raises(ActlabError, match="refusing to load"):
        load_npy(path)
    assert "must never run" not in capsys.readouterr().out
    assert pickle.loads(pickle.dumps(1)) == 1  # the stdlib itself is untouched


class _RunsShell:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


class _PlainRecord:
    """An ordinary user class: unpickling it would import and instantiate arbitrary code."""

    def __init__(self):
        self.state = np.zeros(3)


@pytest.mark.parametrize("payload", ["os.system", "instance", "global"])
def test_restricted_unpickler_refuses_non_numpy_objects(tmp_path, payload):
    marker = tmp_path / "pwned"
    obj = {
        "os.system": lambda: _RunsShell(marker),
        "instance": _PlainRecord,
        "global": lambda: np.save,  # a function reference is a global lookup too
    }[payload]()
    arr = np.empty(2, dtype=object)
    arr[0], arr[1] = {"state": np.zeros(3)}, {"state": obj}
    path = tmp_path / "observations.npy"
    np.save(path, arr, allow_pickle=True)
    with pytest.raises(ActlabError, match="refusing to load") as e:
        load_npy(path)
    assert not marker.exists()  # the shell command never ran
    assert e.value.file == str(path) and e.value.found and e.value.fix


def test_restricted_unpickler_still_reads_plain_object_arrays(tmp_path):
    arr = np.empty(2, dtype=object)
    arr[0] = {"state": np.arange(3, dtype=np.float32), "n": 1, "name": "a", "nested": [1.5, {"k": (1, 2)}]}
    arr[1] = {"state": np.arange(3, dtype=np.float64), "n": np.int64(2), "name": "b", "nested": []}
    np.save(tmp_path / "o.npy", arr, allow_pickle=True)
    out = load_npy(tmp_path / "o.npy")
    assert out.dtype == object and out[0]["nested"][1]["k"] == (1, 2) and out[1]["n"] == 2
    assert np.array_equal(out[1]["state"], np.arange(3.0)) and out[1]["state"].dtype == np.float64


@pytest.mark.parametrize(
    ("image", "message"),
    [
        (np.full((20, 16, 24, 3), 1000, np.uint16), "out of range"),  # astype(uint8) would wrap
        (np.full((20, 16, 24, 3), -0.5, np.float32), "out of range"),  # [-1, 1] normalized
    ],
)
def test_images_that_cannot_be_cast_safely_are_refused(tmp_path, image, message, capsys):
    _source(tmp_path / "src", "columns")
    obs = np.load(tmp_path / "src/observations.npy", allow_pickle=True).item()
    obs["image_left"] = image
    np.save(tmp_path / "src/observations.npy", obs, allow_pickle=True)
    assert main(["data", "convert", str(tmp_path / "src"), "--out", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err and not (tmp_path / "out").exists()
