"""Between env and policy: observations (HWC uint8 numpy) -> policy batches (B, C, H, W) tensors, and the
policy's actions back to numpy.

The expected inputs of a policy (which keys, which image size) come from the bundle's ``features.json``
(the dataset features the policy was trained on, images ``[H, W, C]``) or from the policy object's
``features`` attribute. Images of a different size are resized here (bilinear with antialiasing, as an
image library would), but the harness first tries to make the sim render at the trained size. A camera
whose training frames the FrameStore resized (``info["actlab.resize"]`` in features.json, mode
``fit_pad``) is resized the same way: longer side to the trained size, black centred padding to a square.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from actlab.datasets.video import fit_size
from actlab.errors import ActlabError
from actlab.policies.contract import RolloutPolicy

# How the FrameStore records a resize in a camera feature's "info" (actlab.datasets.framestore
# .stored_features writes it; the bundle's features.json carries it): {"mode": "fit_pad", ...}.
RESIZE_INFO = "actlab.resize"
RESIZE_MODE = "fit_pad"


@dataclass(frozen=True)
class PolicyInputs:
    """What a policy takes: its observation keys and, for cameras, the (H, W) it was trained on."""

    state_keys: tuple[str, ...]  # float features, e.g. ("observation.state",)
    image_hw: dict[str, tuple[int, int]]  # camera key -> (H, W) the policy was trained on
    fit_pad: frozenset[str] = frozenset()  # cameras trained on frames fitted into a padded square

    @property
    def keys(self) -> tuple[str, ...]:
        return (*self.state_keys, *self.image_hw)


def _is_image(key: str, feat: Mapping) -> bool:
    return feat.get("dtype") in ("video", "image") or key.startswith("observation.image")


def inputs_from_features(features: Mapping[str, Mapping]) -> PolicyInputs:
    """Read the observation inputs from a LeRobot-style features dict (images ``[H, W, C]``)."""
    state, images, fit_pad = [], {}, set()
    for key, feat in features.items():
        if not key.startswith("observation."):
            continue
        if _is_image(key, feat):
            resize = (feat.get("info") or {}).get(RESIZE_INFO)
            if isinstance(resize, Mapping) and resize.get("mode") == RESIZE_MODE:
                fit_pad.add(key)
            shape = list(feat["shape"])
            names = list(feat.get("names") or [])
            if names[:1] == ["channels"] or (len(shape) == 3 and shape[0] == 3 and shape[-1] != 3):
                images[key] = (int(shape[1]), int(shape[2]))  # stored CHW
            else:
                images[key] = (int(shape[0]), int(shape[1]))  # LeRobot convention HWC
        else:
            state.append(key)
    return PolicyInputs(tuple(state), images, frozenset(fit_pad))


def _read_json(f: Path) -> Any:
    try:
        data = json.loads(f.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        msg = f"{f.name} is not valid JSON: {e.msg}"
        raise ActlabError(msg, file=f, fix="use an intact bundle (re-save it with save_policy)") from e
    except UnicodeDecodeError as e:  # bytes overwritten in the file, or not a JSON file at all
        msg = f"{f.name} is not UTF-8 text ({e.reason} at byte {e.start})"
        raise ActlabError(msg, file=f, fix="use an intact bundle (re-save it with save_policy)") from e
    if not isinstance(data, dict):  # `[]` was "'list' object has no attribute 'get'" later
        msg = f"{f.name} is not a JSON object"
        raise ActlabError(msg, file=f, found=type(data).__name__, fix="use an intact bundle (re-save it)")
    return data


def _only_cameras(inputs: PolicyInputs, cameras: Sequence[str] | None) -> PolicyInputs:
    if not cameras:
        return inputs
    images = {k: v for k, v in inputs.image_hw.items() if k in cameras}
    return PolicyInputs(inputs.state_keys, images, inputs.fit_pad & set(images))


def bundle_inputs(path: str | Path) -> PolicyInputs | None:
    """Inputs of a policy bundle from its ``features.json``, restricted to the cameras its
    ``config.json`` selects when it names any; None when the bundle has no features.json."""
    f = Path(path) / "features.json"
    if not f.is_file():
        return None
    features = _read_json(f)
    if isinstance(features, Mapping) and isinstance(features.get("features"), Mapping):
        features = features["features"]
    inputs = inputs_from_features(features)
    config = Path(path) / "config.json"
    cameras = _read_json(config).get("cameras") if config.is_file() else None
    return _only_cameras(inputs, cameras if isinstance(cameras, list) else None)


def policy_inputs(policy: RolloutPolicy) -> PolicyInputs | None:
    """Inputs declared by a policy object, or None for a policy that declares none.

    Uses ``camera_keys`` + ``image_shapes`` ((C, H, W) per camera) where the policy has them (actlab's
    ACT policies), else its ``features`` dict (dataset features).
    """
    feats = getattr(policy, "features", None)
    if not (isinstance(feats, Mapping) and feats and all(isinstance(v, Mapping) for v in feats.values())):
        return None
    inputs = inputs_from_features(feats)
    cams, shapes = getattr(policy, "camera_keys", None), getattr(policy, "image_shapes", None)
    if isinstance(shapes, Mapping) and cams is not None:
        images = {k: (int(shapes[k][-2]), int(shapes[k][-1])) for k in cams}
        return PolicyInputs(inputs.state_keys, images, inputs.fit_pad & set(images))
    return inputs


def match_keys(available: Sequence[str], inputs: PolicyInputs | None) -> dict[str, str]:
    """Map each policy input key to an env observation key.

    Exact names first; a policy camera missing from the env takes the one env camera nobody else
    claimed (peer envs name their single camera differently, e.g. ``observation.image``). Anything else
    missing is an ActlabError naming both sides.
    """
    if inputs is None:
        return {k: k for k in available}
    mapping = {k: k for k in inputs.keys if k in available}
    missing = [k for k in inputs.keys if k not in mapping]
    free_images = [k for k in available if k.startswith("observation.image") and k not in mapping.values()]
    for key in list(missing):
        if (
            key in inputs.image_hw
            and len(free_images) == 1
            and len([m for m in missing if m in inputs.image_hw]) == 1
        ):
            mapping[key] = free_images.pop()
            missing.remove(key)
    if missing:
        raise ActlabError(
            "the environment does not provide every observation the policy was trained on",
            field="observation keys",
            expected=", ".join(inputs.keys),
            found=", ".join(available),
            # (it said "render the missing cameras (--cameras)": no command takes --cameras for this, and a
            # gym env has the cameras it has)
            fix=f"evaluate on a task whose environment gives {', '.join(missing)} (the task the policy was "
            "trained for: --task, as its bundle records it)",
        )
    return mapping


class ObsAdapter:
    """Stacks env observations into the batch a policy takes: images (B, C, H, W) uint8, state (B, D) f32."""

    def __init__(self, inputs: PolicyInputs | None, device: Any = "cpu") -> None:
        self.inputs = inputs
        self.device = device
        self._mapping: dict[str, str] | None = None

    def __call__(self, observations: Sequence[Mapping[str, np.ndarray]]) -> dict[str, Any]:
        import torch

        if self._mapping is None:
            self._mapping = match_keys(sorted(observations[0]), self.inputs)
        batch = {}
        for key, src in self._mapping.items():
            arr = np.stack([np.asarray(o[src]) for o in observations])
            if key.startswith("observation.image"):
                # (B, H, W, C) uint8 -> (B, C, H, W) uint8; the policy normalizes images itself.
                t = torch.from_numpy(np.ascontiguousarray(arr)).permute(0, 3, 1, 2)
                if self.inputs is not None and key in self.inputs.image_hw:
                    t = resize_images(t, self.inputs.image_hw[key], fit_pad=key in self.inputs.fit_pad)
                batch[key] = t.contiguous().to(self.device)
            else:
                batch[key] = torch.from_numpy(arr.astype(np.float32)).to(self.device)  # (B, D)
        return batch


def resize_images(images: Any, hw: tuple[int, int], fit_pad: bool = False) -> Any:
    """Resize a (B, C, H, W) uint8 tensor to ``hw`` (bilinear, antialiased); unchanged when already there.

    ``fit_pad`` (a square ``hw``): keep the aspect ratio as the FrameStore does, longer side to the
    target, the shorter side padded with black, centred (``actlab.datasets.video.fit_size``).
    """
    import torch.nn.functional as F

    if tuple(images.shape[-2:]) == tuple(hw):
        return images
    top = left = 0
    size = tuple(hw)
    if fit_pad and hw[0] == hw[1]:
        new_h, new_w, top, left = fit_size(int(images.shape[-2]), int(images.shape[-1]), int(hw[0]))
        size = (new_h, new_w)
    out = F.interpolate(images.float(), size=size, mode="bilinear", antialias=True, align_corners=False)
    out = out.round().clamp(0, 255).to(images.dtype)  # (B, C, h, w)
    if size != tuple(hw):
        bottom, right = hw[0] - size[0] - top, hw[1] - size[1] - left
        out = F.pad(out, (left, right, top, bottom))  # black bars, centred: (B, C, H, W)
    return out


def actions_to_numpy(actions: Any, batch: int) -> np.ndarray:
    """Policy output (tensor or array, (B, A) or (A,)) -> float32 numpy (B, A)."""
    if hasattr(actions, "detach"):
        # Why: this .cpu() is the one host sync per control step; the env needs the numbers now.
        actions = actions.detach().float().cpu().numpy()
    arr = np.asarray(actions, dtype=np.float32)
    if arr.ndim == 1:
        arr = arr[None]
    if arr.shape[0] != batch:
        raise ActlabError(
            "the policy returned actions for a different number of environments than it was given",
            field="select_action output",
            expected=f"batch {batch}",
            found=f"shape {tuple(arr.shape)}",
            fix="evaluate this policy with batch_envs=1 (--batch-envs 1), or make it accept a batch",
        )
    return arr
