"""Small policies for evaluation tests. They are real policies (they act on real envs), not fakes of
actlab.policies: the harness takes any object with reset()/select_action()."""

from __future__ import annotations

import numpy as np
import torch


class HoldPolicy:
    """Commands the same target every step; counts resets (the harness must reset before every episode)."""

    def __init__(self, target) -> None:
        self.target = torch.as_tensor(np.asarray(target, dtype=np.float32))
        self.resets = 0
        self.calls = 0

    def reset(self) -> None:
        self.resets += 1

    def select_action(self, obs: dict) -> torch.Tensor:
        self.calls += 1
        batch = obs["observation.state"].shape[0]
        return self.target.expand(batch, -1).clone()  # (B, A)


def pusht_hold_factory(env) -> HoldPolicy:
    """Picklable factory for worker processes (a factory gets the env it will act in)."""
    return HoldPolicy([300.0, 300.0])


class ExpertChunkPolicy:
    """The sim's scripted expert exposed as a chunking policy: ``predict_action_chunk`` returns the next
    ``horizon`` actions of its plan, ``select_action`` executes them one by one. Bound to its env."""

    def __init__(self, env, horizon: int = 20) -> None:
        from actlab.sim import ExpertPolicy

        self.expert = ExpertPolicy(env)
        self.horizon = horizon
        self.t = 0

    def reset(self) -> None:
        self.expert.reset()
        self.t = 0

    def _plan(self, obs) -> np.ndarray:
        if self.expert._plan is None:
            self.expert.select_action(obs)  # makes the plan for the current scene
            self.expert._t = 0
        return self.expert._plan

    def predict_action_chunk(self, obs) -> torch.Tensor:
        plan = self._plan(obs)
        idx = np.minimum(np.arange(self.t, self.t + self.horizon), len(plan) - 1)
        return torch.from_numpy(plan[idx])[None]  # (1, H, 6)

    def select_action(self, obs) -> torch.Tensor:
        plan = self._plan(obs)
        action = plan[min(self.t, len(plan) - 1)]
        self.t += 1
        return torch.from_numpy(action)[None]  # (1, 6)


def expert_chunk_factory(env) -> ExpertChunkPolicy:
    return ExpertChunkPolicy(env)


class RandomPolicy:
    """Uniform random joint targets within the SO-101's joint ranges (degrees), from its own generator."""

    def __init__(self, seed: int = 0) -> None:
        from actlab.sim.scene import JOINT_RANGES

        self.low = np.degrees([r[0] for r in JOINT_RANGES]).astype(np.float32)
        self.high = np.degrees([r[1] for r in JOINT_RANGES]).astype(np.float32)
        self.rng = np.random.default_rng(seed)
        self.resets = 0

    def reset(self) -> None:
        self.resets += 1

    def select_action(self, obs) -> torch.Tensor:
        batch = obs["observation.state"].shape[0]
        return torch.from_numpy(self.rng.uniform(self.low, self.high, (batch, 6)).astype(np.float32))


class EarlyReleasePolicy:
    """The scripted expert, except that from step ``open_at`` on it commands the gripper open: the cube
    leaves the jaws wherever the expert has carried it by then."""

    def __init__(self, env, open_at: int) -> None:
        from actlab.sim import ExpertPolicy
        from actlab.sim.scene import GRIPPER_OPEN

        self.expert = ExpertPolicy(env)
        self.open_at = open_at
        self.open_deg = float(np.degrees(GRIPPER_OPEN))
        self.t = 0

    def reset(self) -> None:
        self.expert.reset()
        self.t = 0

    def select_action(self, obs) -> torch.Tensor:
        action = self.expert.select_action(obs).clone()  # (1, 6)
        if self.t >= self.open_at:
            action[:, 5] = self.open_deg
        self.t += 1
        return action


class FreezePolicy(EarlyReleasePolicy):
    """The scripted expert until step ``freeze_at``, then the same action forever: it keeps holding the
    lifted cube until time runs out."""

    def __init__(self, env, freeze_at: int) -> None:
        super().__init__(env, open_at=10**9)
        self.freeze_at = freeze_at
        self.frozen = None

    def reset(self) -> None:
        super().reset()
        self.frozen = None

    def select_action(self, obs) -> torch.Tensor:
        if self.t < self.freeze_at:
            self.frozen = super().select_action(obs)
            return self.frozen
        self.t += 1
        return self.frozen.clone()


class RedSteerPolicy:
    """A batched policy that steers the shoulder towards the red cube in the overhead image: each row's
    action depends only on that row's observation (so a batch of B rows must act exactly like B separate
    B = 1 runs), and differs between episodes (the cube moves with the seed)."""

    def __init__(self) -> None:
        self.resets = 0
        self.calls = 0

    def reset(self) -> None:
        self.resets += 1

    def select_action(self, obs: dict) -> torch.Tensor:
        self.calls += 1
        img = obs["observation.images.top"].float()  # (B, 3, H, W) uint8 -> float
        red = (img[:, 0] > 150) & (img[:, 1] < 70) & (img[:, 2] < 70)  # (B, H, W)
        cols = torch.arange(img.shape[-1], dtype=torch.float32)
        col = (red.float().sum(1) * cols).sum(1) / red.float().sum((1, 2)).clamp(min=1)  # (B,)
        action = obs["observation.state"].clone()  # (B, 6) degrees
        action[:, 0] += 0.2 * (col - img.shape[-1] / 2)
        action[:, 1] += 1.5  # and lean forward a little every step
        return action


CAMS = ("top", "wrist")


def _features() -> dict:
    names = [f"j{i}" for i in range(5)] + ["gripper"]
    feats = {
        "observation.state": {"dtype": "float32", "shape": [6], "names": names},
        "action": {"dtype": "float32", "shape": [6], "names": names},
    }
    for cam in CAMS:
        feats[f"observation.images.{cam}"] = {"dtype": "video", "shape": [32, 32, 3], "names": None}
    return feats


def _stats(horizon: int) -> dict:
    def entry(mean, std):
        return {"mean": np.asarray(mean, float), "std": np.asarray(std, float)}

    # Joint angles in degrees, as the sim reports them.
    stats = {"observation.state": entry(np.zeros(6), np.full(6, 30.0))}
    stats["action.relative"] = {
        **entry(np.zeros(6), np.full(6, 5.0)),
        "mean_per_step": np.zeros((horizon, 6)),
        "std_per_step": np.full((horizon, 6), 5.0),
    }
    return stats


def tiny_rel_bundle(path, chunk_size: int = 12, n_action_steps: int = 6, rtc_max_delay: int = 4):
    """An untrained act_relative bundle for the sim (chunk 12, 6 actions per chunk, rtc_max_delay 4 by
    default), saved at ``path``."""
    from actlab.policies import ACTRelativeConfig, make_policy, save_policy

    torch.manual_seed(0)
    cfg = ACTRelativeConfig(
        cameras=tuple(f"observation.images.{c}" for c in CAMS),
        chunk_size=chunk_size,
        n_action_steps=n_action_steps,
        vision_backbone="cnn_small",
        dim_model=32,
        n_heads=2,
        dim_feedforward=64,
        n_encoder_layers=1,
        n_decoder_layers=1,
        latent_dim=8,
        n_vae_encoder_layers=1,
        dropout=0.0,
        rtc_max_delay=rtc_max_delay,
    )
    policy = make_policy(cfg, _features(), _stats(chunk_size), pretrained=False)
    return save_policy(policy, path)
