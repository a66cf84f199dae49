"""Import the ``.npy`` episode format into LeRobot v3.0.

A source directory holds ``observations.npy`` (an array of per-frame dicts, or a dict of arrays, with
``image_*`` cameras and ``state``), ``actions.npy`` (T, A) and ``rollout_length.npy`` (E,) whose sum
must equal T: the episodes are concatenated in that order.

Object arrays (dicts) are stored with pickle inside the .npy. actlab never unpickles arbitrary user
input: a restricted unpickler admits only numpy arrays, dtypes, scalars and plain containers, and
refuses anything else (no code can run from a crafted file).
"""

from __future__ import annotations

import contextlib
import itertools
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from actlab.datasets.format import camera_feature, vector_feature
from actlab.datasets.video import VideoOptions, write_video_with_retry
from actlab.datasets.writer import DatasetWriter
from actlab.errors import ActlabError

_ALLOWED = {
    (mod, name)
    for mod in ("numpy.core.multiarray", "numpy._core.multiarray")
    for name in ("_reconstruct", "scalar")
} | {
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"),
    ("collections", "OrderedDict"),
}


class _NumpyOnlyUnpickler(pickle.Unpickler):
    def __init__(self, file, path: Path) -> None:
        super().__init__(file)
        self.path = path

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED or (module == "numpy" and name.endswith("DType")):
            return super().find_class(module, name)
        raise ActlabError(
            "refusing to load a pickled object that is not a numpy array or plain container",
            file=self.path,
            expected="arrays, dicts, lists, numbers",
            found=f"{module}.{name}",
            fix="re-save the file with only numpy arrays and dicts",
        )


def load_npy(path: str | Path) -> Any:
    """Load a .npy file; object arrays go through the restricted unpickler."""
    path = Path(path)
    if not path.is_file():
        raise ActlabError("file missing", file=path, fix="check the source directory")
    with open(path, "rb") as f:
        try:
            version = np.lib.format.read_magic(f)
            reader = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )
            _shape, _fortran, dtype = reader(f)
        except ValueError as e:
            raise ActlabError(f"not a .npy file: {e}", file=path, fix="re-save it with np.save") from e
        if not dtype.hasobject:
            try:
                return np.load(path, allow_pickle=False)
            except (ValueError, EOFError) as e:  # cut short: numpy's "Failed to read all data" traceback
                raise ActlabError(
                    "the .npy file is cut short or damaged",
                    file=path,
                    expected=f"an array of shape {tuple(_shape)} ({dtype})",
                    found=str(e)[:160],
                    fix="copy the file again from its source, or re-save it with np.save",
                ) from e
        try:
            arr = _NumpyOnlyUnpickler(f, path).load()
        except ActlabError:
            raise
        except Exception as e:
            raise ActlabError(f"cannot read pickled array: {e}", file=path, fix="re-save it") from e
    return arr


def _columns(obs: Any, path: Path) -> dict[str, np.ndarray]:
    """Observations as a dict of per-frame arrays, from either layout."""
    if isinstance(obs, np.ndarray) and obs.dtype == object and obs.ndim == 0:
        obs = obs.item()
    if isinstance(obs, Mapping):
        return {str(k): np.asarray(v) for k, v in obs.items()}
    if isinstance(obs, np.ndarray) and obs.dtype == object and obs.ndim == 1:
        if len(obs) == 0 or not all(isinstance(o, Mapping) for o in obs):
            raise ActlabError(
                "observations must be an array of dicts or a dict of arrays",
                file=path,
                expected="dicts with image_left / image_right / state",
                found=type(obs[0]).__name__ if len(obs) else "empty array",
            )
        keys = list(obs[0].keys())
        for i, o in enumerate(obs):  # a frame without a key was KeyError's traceback
            if set(o.keys()) != set(keys):
                raise ActlabError(
                    f"frame {i} of the observations has other keys than frame 0",
                    file=path,
                    field=f"observations[{i}]",
                    expected=", ".join(map(str, keys)),
                    found=", ".join(map(str, o.keys())) or "no keys",
                    fix="give every frame the same keys (image_left / image_right / state), then re-save it",
                )
        out = {}
        for k in keys:
            try:
                out[str(k)] = np.stack([np.asarray(o[k]) for o in obs])
            except ValueError as e:  # frames of different shapes: numpy's "all input arrays must ..."
                shapes = sorted({np.asarray(o[k]).shape for o in obs})
                raise ActlabError(
                    f"the frames' {k} differ in shape",
                    file=path,
                    field=str(k),
                    expected="one shape for every frame",
                    found=", ".join(map(str, shapes[:4])),
                    fix=f"give every frame's {k} the same shape, then re-save it",
                ) from e
        return out
    raise ActlabError(
        "observations must be an array of dicts or a dict of arrays",
        file=path,
        expected="object array",
        found=f"{type(obs).__name__} {getattr(obs, 'dtype', '')}",
    )


def _to_hwc_uint8(img: np.ndarray, key: str, path: Path) -> np.ndarray:
    if img.ndim != 4:
        raise ActlabError("camera images must be (T, H, W, 3)", file=path, field=key, found=img.shape)
    if img.shape[-1] != 3 and img.shape[1] == 3:
        img = img.transpose(0, 2, 3, 1)  # (T, 3, H, W) -> (T, H, W, 3)
    if img.shape[-1] != 3:
        raise ActlabError(
            "camera images must be RGB", file=path, field=key, expected="3 channels", found=img.shape
        )
    if not (np.issubdtype(img.dtype, np.floating) or np.issubdtype(img.dtype, np.integer)):
        raise ActlabError("camera images must be numbers", file=path, field=key, found=str(img.dtype))
    lo, hi = (float(img.min()), float(img.max())) if img.size else (0.0, 0.0)
    if lo < 0 or hi > 255 or not np.isfinite([lo, hi]).all():
        # Casting would wrap (uint16) or clip (normalized [-1, 1]) the pixels silently.
        raise ActlabError(
            "camera pixel values out of range",
            file=path,
            field=key,
            expected="uint8 0..255, or floats in [0, 1] or [0, 255]",
            found=f"{img.dtype} values in [{lo:g}, {hi:g}]",
            fix="rescale the images to 0..255 (e.g. (img + 1) * 127.5 for [-1, 1]) and re-save",
        )
    if np.issubdtype(img.dtype, np.floating):
        if hi <= 1.0 + 1e-6:
            img = img * 255.0
        img = np.clip(np.round(img), 0, 255)
    return img.astype(np.uint8)


def _not_a_number(arr: np.ndarray) -> str | None:
    """What, in an object array, is no number (None, text, a frame of another shape than frame 0), in
    words with its index; None when every element is a number or an array of frame 0's shape."""
    first = None
    for i, e in enumerate(arr.flat):
        if e is None:
            return f"None at index {i}"
        if isinstance(e, str | bytes):
            return f"text {e!r:.40} at index {i}"
        shape = np.shape(e)
        if np.asarray(e).dtype.kind not in "biufc" and shape:
            return f"frame {i} of {np.asarray(e).dtype} values"
        if first is None:
            first = shape
        elif shape != first:
            return f"frame {i} of shape {list(shape)}, frame 0 of shape {list(first)}"
    return None


def _real(values: Any, path: Path, field: str) -> np.ndarray:
    """Numbers as float32, refusing what the cast would change without a word: complex values (their
    imaginary parts were dropped with numpy's ComplexWarning and the dataset written) and finite values
    float32 cannot hold (1e40 became inf and was refused as "non-finite", as if the file held inf)."""
    arr = np.asarray(values)
    if arr.dtype.kind == "O":  # per-frame lists or Python numbers: numbers if every element is one
        odd = _not_a_number(arr)
        if odd is not None:
            # Why: frames of two shapes, text or None were "not real numbers, found object" with the fix
            # for complex values (np.real), and None was cast to NaN and refused as a non-finite value
            raise ActlabError(
                f"{field} hold something other than numbers"
                if field == "actions"
                else f"{field} holds something other than numbers",
                file=path,
                field=field,
                expected="one array of numbers, every frame of one shape",
                found=odd,
                fix=f"save {field} as one numeric array (np.asarray(frames, dtype=np.float32), every frame "
                "of the same length, no None or text), then convert again",
            )
        with contextlib.suppress(TypeError, ValueError):
            # frames saved one array each (of one shape): stacked, as the same frames in one array are
            arr = np.stack(arr.tolist()) if arr.ndim == 1 and np.ndim(arr.flat[0]) else arr.astype(np.float64)
    if arr.dtype.kind not in "biuf":
        raise ActlabError(
            f"{field} are not real numbers" if field == "actions" else f"{field} is not real numbers",
            file=path,
            field=field,
            expected="integers or floats",
            found=str(arr.dtype),
            fix="save real numbers (np.real(x) if the imaginary parts are zero)",
        )
    big = np.abs(arr[np.isfinite(arr)]) > np.finfo(np.float32).max if arr.dtype.kind == "f" else None
    if big is not None and big.any():
        raise ActlabError(
            f"{field} hold values float32 cannot represent",
            file=path,
            field=field,
            expected=f"|value| <= {np.finfo(np.float32).max:.3g} (LeRobot stores float32)",
            found=f"{float(np.max(np.abs(arr[np.isfinite(arr)]))):.3g}",
            fix="rescale the values (e.g. to degrees or metres) and re-save",
        )
    return arr.astype(np.float32)


def read_npy_episodes(src: str | Path) -> tuple[list[dict[str, np.ndarray]], dict[str, Any]]:
    """Split a .npy source into per-episode frame dicts keyed as LeRobot features."""
    src = Path(src)
    obs_path, act_path, len_path = src / "observations.npy", src / "actions.npy", src / "rollout_length.npy"
    cols = _columns(load_npy(obs_path), obs_path)
    actions = _real(load_npy(act_path), act_path, "actions")
    raw = np.asarray(load_npy(len_path)).reshape(-1)
    if raw.dtype.kind not in "iu" and not (raw.dtype.kind == "f" and np.all(np.mod(raw, 1) == 0)):
        # [10.5, 9.5] was cut to [10, 9] and refused as "sum 19" (it sums to 20)
        raise ActlabError(
            "rollout lengths are not whole numbers",
            file=len_path,
            field="rollout_length",
            expected="integers (frames per rollout)",
            found=f"{raw.dtype} {raw[:5].tolist()}",
            fix="save rollout_length.npy as integers, one per rollout",
        )
    lengths = raw.astype(np.int64)
    if actions.ndim != 2:
        raise ActlabError("actions must be (T, A)", file=act_path, field="actions", found=actions.shape)
    total = len(actions)
    bad = np.flatnonzero(lengths <= 0)
    if bad.size:  # said first: [25, -5] adds up to 20 frames and was blamed on the sum
        raise ActlabError(
            "a rollout length is zero or negative",
            file=len_path,
            field="rollout_length",
            expected="a positive number of frames per rollout",
            found=", ".join(f"rollout {i}: {int(lengths[i])}" for i in bad[:5]),
            fix="fix rollout_length.npy: one positive length per rollout, in order",
        )
    summed = int(lengths.sum())
    if summed != total and cols and {len(a) for a in cols.values()} == {summed}:
        # the observations and the lengths agree: actions.npy is the odd one out (it was blamed on
        # rollout_length.npy, "fix rollout_length.npy so each rollout's length is listed once")
        raise ActlabError(
            "actions.npy has another number of frames than observations.npy and rollout_length.npy",
            file=act_path,
            field="actions",
            expected=f"{summed} rows (the observations' frames, the sum of the rollout lengths)",
            found=f"{total} rows",
            fix="export actions.npy again with one action per frame (it was cut short or padded)",
        )
    if summed != total:
        raise ActlabError(
            "rollout lengths do not add up to the number of frames",
            file=len_path,
            field="rollout_length",
            expected=f"positive lengths summing to {total} (rows of actions.npy)",
            found=f"sum {summed} over {len(lengths)} rollouts",
            fix="fix rollout_length.npy so each rollout's length is listed once",
        )
    frames: dict[str, np.ndarray] = {"action": actions}
    ignored = []
    for key, arr in cols.items():
        if len(arr) != total:
            raise ActlabError(
                "observation has a different number of frames than actions.npy",
                file=obs_path,
                field=key,
                expected=total,
                found=len(arr),
            )
        if key.startswith("image"):
            name = key.split("_", 1)[1] if "_" in key else key
            frames[f"observation.images.{name}"] = _to_hwc_uint8(arr, key, obs_path)
        elif key == "state":
            frames["observation.state"] = _real(arr, obs_path, key).reshape(total, -1)
        else:
            ignored.append(key)
    if "observation.state" not in frames:
        raise ActlabError(
            "observations lack 'state'", file=obs_path, field="state", expected="present", found=list(cols)
        )
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    episodes = [{k: v[a:b] for k, v in frames.items()} for a, b in itertools.pairwise(bounds)]
    return episodes, {"ignored_keys": ignored, "episodes": len(episodes), "frames": total}


def convert_npy(
    src: str | Path,
    out: str | Path,
    fps: int = 30,
    task: str = "task",
    robot_type: str | None = None,
    overwrite: bool = False,
    video: VideoOptions | str = "av1",
) -> dict[str, Any]:
    """Convert a .npy episode directory into a LeRobot v3.0 dataset at ``out`` (atomic).

    ``video``: the settings, or a codec name ("auto" chooses for this machine); a stalled encoder
    converts everything once more."""
    episodes, summary = read_npy_episodes(src)
    first = episodes[0]
    features: dict[str, Any] = {}
    for key, arr in first.items():
        if key.startswith("observation.images."):
            features[key] = camera_feature(arr.shape[1], arr.shape[2], fps)
        else:
            features[key] = vector_feature(arr.shape[1])

    def write(options: VideoOptions) -> None:
        with DatasetWriter(
            out,
            fps,
            features,
            robot_type=robot_type,
            video=options,
            overwrite=overwrite,
            kind="actlab data convert",
            inputs=[src],
        ) as w:
            for ep in episodes:
                w.add_episode(ep, task=task)

    write_video_with_retry(write, video, what="converting")
    summary["out"] = str(out)
    return summary
