"""The policy doctor for any LeRobot policy: the checks of :mod:`actlab.evaluation.doctor`, with the policy
running in the user's lerobot environment through the bridge (:mod:`actlab.lerobot.bridge`).

What the doctor reads here, without lerobot and without unpickling anything: the policy's ``config.json``
(input/output features, ``n_obs_steps``, ``n_action_steps``), the statistics its saved preprocessor
normalizes with (``policy_preprocessor.json`` names the normalizer step and its ``.safetensors`` state
file) and the training split (``train_config.json``: ``dataset.episodes``, ``dataset.root``). What runs in
the child: the policy with its own processors (replay, reset), and the ``processors`` request (the dataset's
actions normalized by the preprocessor and de-normalized by the postprocessor). A missing processor file
is reported and an identity stand-in runs in its place (``--missing-processors identity``), so the replay
shows what a deployment without it does.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from actlab.datasets import open_dataset
from actlab.errors import ActlabError
from actlab.evaluation.doctor import DoctorConfig, diagnose
from actlab.evaluation.doctor.checks import recorded_split
from actlab.lerobot.bridge import LeRobotBridgePolicy
from actlab.utils.io import require_file

PREPROCESSOR = "policy_preprocessor.json"
POSTPROCESSOR = "policy_postprocessor.json"
# The registry names of lerobot's (un)normalizer steps in the processor files (lerobot 0.6).
NORMALIZER_STEP = "normalizer_processor"
STATE = "observation.state"


def _json(file: Path, what: str) -> Any:
    try:
        return json.loads(file.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ActlabError(
            f"cannot read the {what}", file=file, found=str(e), fix="use an intact checkpoint"
        ) from e


def processor_stats(policy_dir: str | Path) -> dict[str, dict[str, np.ndarray]]:
    """``{feature: {"mean", "std", ...}}`` the saved preprocessor's normalizer step applies ({} without one).

    The state file is safetensors (read as numpy, nothing unpickled); its tensors are named
    ``<feature>.<stat>`` (``observation.images.top.std``, ``action.mean`` ...)."""
    from safetensors.numpy import load_file

    file = Path(policy_dir) / PREPROCESSOR
    if not file.is_file():
        return {}
    spec = _json(file, "LeRobot preprocessor")
    steps = spec.get("steps", []) if isinstance(spec, dict) else []
    step = next((s for s in steps if isinstance(s, dict) and s.get("registry_name") == NORMALIZER_STEP), None)
    if step is None or not step.get("state_file"):
        return {}
    state = Path(policy_dir) / step["state_file"]
    require_file(
        state,
        "the preprocessor's normalizer state file is missing",
        field=f"{PREPROCESSOR}: steps[].state_file",
        expected="a safetensors file of the normalizer's statistics",
        fix="copy the whole pretrained_model directory of the training run",
    )
    config = step.get("config") or {}
    features, modes = config.get("features") or {}, config.get("norm_map") or {}
    # a feature type normalized by IDENTITY (SmolVLA's and Pi0's images) is not normalized at all: its
    # statistics in the file are unused
    used = {k for k, f in features.items() if modes.get((f or {}).get("type"), "MEAN_STD") != "IDENTITY"}
    out: dict[str, dict[str, np.ndarray]] = {}
    for name, tensor in load_file(str(state)).items():
        key, _, stat = name.rpartition(".")
        if key in used:
            out.setdefault(key, {})[stat] = tensor.astype(np.float64)
    return {k: v for k, v in out.items() if "mean" in v and "std" in v}


def recorded_lerobot_split(policy_dir: str | Path, dataset: Any) -> dict[str, Any] | None:
    """The training split of a lerobot-train checkpoint (``train_config.json``), in the form
    :func:`actlab.evaluation.doctor.choose_episodes` reads; None without the file.

    ``dataset.episodes`` null means every episode trained it (nothing held out). The dataset is the
    training one when ``dataset.root`` is this dataset's directory."""
    file = Path(policy_dir) / "train_config.json"
    if not file.is_file():
        return None
    cfg = _json(file, "LeRobot train config")
    data = cfg.get("dataset") if isinstance(cfg, dict) else None
    if not isinstance(data, dict):
        return None
    have = sorted(int(e.index) for e in dataset.episodes)
    episodes = data.get("episodes")
    train = have if episodes is None else sorted(int(e) for e in episodes)
    root = data.get("root")
    same = root is not None and Path(root).resolve() == Path(dataset.root).resolve()
    trained_on = {"path": root or data.get("repo_id"), "fingerprint": dataset.fingerprint if same else None}
    return {
        "train_episodes": train,
        "val_episodes": [e for e in have if e not in set(train)],
        "dataset": trained_on,
    }


def plugin_bundle(policy_dir: str | Path) -> Path | None:
    """The actlab bundle inside an export of actlab's LeRobot plugin (``actlab_bundle/``), or None: its
    features record the training frames' resize, its actlab.json the training episodes (the doctor said
    "trained on 32x32 frames, the dataset has 16x16" of the 16 px frames it was trained on, resized, and
    "the bundle does not record which episodes trained it")."""
    bundle = Path(policy_dir) / "actlab_bundle"
    return bundle if (bundle / "actlab.json").is_file() and (bundle / "features.json").is_file() else None


class LeRobotDoctorPolicy:
    """A bridged LeRobot policy with what the doctor asks of a policy: ``features`` (the env's names),
    ``stats`` (the preprocessor's), ``observation_delta_indices`` (``n_obs_steps`` frames up to now),
    ``config.n_action_steps``, ``processors(action)`` and the missing processor files."""

    def __init__(self, bridge: LeRobotBridgePolicy) -> None:
        self.bridge = bridge
        cfg = _json(bridge.policy_dir / "config.json", "LeRobot policy config")
        self.n_obs_steps = int(cfg.get("n_obs_steps") or 1)
        self.features = bridge.features
        offsets = list(range(1 - self.n_obs_steps, 1))
        self.observation_delta_indices = {
            bridge.to_env.get(k, k): offsets
            for k, v in bridge.input_features.items()
            if v.get("type") in ("VISUAL", "STATE", "ENV")
        }
        # the chunk length is probed (Diffusion returns n_action_steps actions, ACT chunk_size); the queue
        # executes n_action_steps of it
        self.config = SimpleNamespace(chunk_size=None, n_action_steps=cfg.get("n_action_steps"))
        self.stats = {bridge.to_env.get(k, k): v for k, v in processor_stats(bridge.policy_dir).items()}
        self.missing_processors = [
            str(bridge.policy_dir / f)
            for f in (PREPROCESSOR, POSTPROCESSOR)
            if not (bridge.policy_dir / f).is_file()
        ]
        self.postprocessor_file = str(bridge.policy_dir / POSTPROCESSOR)
        bundle = plugin_bundle(bridge.policy_dir)
        if bundle is not None:  # actlab's plugin: how its frames were resized in training (actlab.resize)
            trained = _json(bundle / "features.json", "actlab bundle's features")
            for key, feat in trained.items() if isinstance(trained, dict) else ():
                env_key = bridge.to_env.get(key, key)
                if isinstance(feat, dict) and isinstance(feat.get("info"), dict) and env_key in self.features:
                    self.features[env_key] = {**self.features[env_key], "info": feat["info"]}

    def reset(self) -> None:
        self.bridge.reset()

    def select_action(self, obs: dict[str, Any]) -> Any:
        return self.bridge.select_action(obs)

    def predict_action_chunk(self, obs: dict[str, Any]) -> Any:
        """A single observation (state ``(B, D)``) is given the time axis of ``n_obs_steps`` copies, as
        lerobot's ``select_action`` fills its observation queue after a reset."""
        state = obs.get(STATE)
        if self.n_obs_steps > 1 and state is not None and state.ndim == 2:
            obs = {k: _repeat(v, self.n_obs_steps) for k, v in obs.items()}
        return self.bridge.predict_action_chunk(obs)

    def processors(self, action: np.ndarray) -> dict[str, np.ndarray]:
        return self.bridge.processors(action)


def _repeat(value: Any, n: int) -> Any:
    import torch

    return torch.as_tensor(value).unsqueeze(1).expand(-1, n, *value.shape[1:]).contiguous()


def doctor_lerobot(
    policy_dir: str | Path,
    python: str | Path,
    dataset: str | Path,
    cfg: Any = None,
    **bridge_kwargs: Any,
) -> Any:
    """:func:`actlab.evaluation.doctor.diagnose` of a LeRobot pretrained-policy directory run by
    ``python`` (``bridge_kwargs``: ``rename``, ``threads`` ... of :class:`LeRobotBridgePolicy`)."""
    cfg = cfg or DoctorConfig()
    args = list(bridge_kwargs.pop("child_args", ()))
    bridge = LeRobotBridgePolicy(
        policy_dir,
        python,
        device=cfg.device,
        child_args=[*args, "--missing-processors", "identity"],
        **bridge_kwargs,
    )
    ds = open_dataset(dataset)
    with bridge:
        policy = LeRobotDoctorPolicy(bridge)
        bundle = plugin_bundle(policy_dir)
        split = recorded_split(bundle) if bundle is not None else recorded_lerobot_split(policy_dir, ds)
        return diagnose(policy, ds, cfg, name=str(policy_dir), split=split)


__all__ = [
    "LeRobotDoctorPolicy",
    "doctor_lerobot",
    "plugin_bundle",
    "processor_stats",
    "recorded_lerobot_split",
]
