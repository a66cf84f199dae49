"""The SAC agent as a policy: what the actor sees, how its [-1, 1] action becomes joint targets, and the
residual wrapper around a frozen chunk policy.

What the actor sees (all of it available on a real robot):
- joint state (deg / 100);
- ``reach``: the commanded target (``observation.goal``);
- residual RL: the base policy's action for this control step (deg / 100), from the base executed with its
  own chunking (``select_action`` pops its queue; a new chunk every ``n_action_steps``);
- images: CNN features of the last K frames (``encoder=cnn``), or the base bundle's frozen backbone
  features (``encoder=frozen``), or a frozen pretrained ViT's pooled features (``encoder=vit``, no base
  needed; with ``frame_stack`` K the last K frames' features side by side; ``vision_backbone=videomae``:
  one VideoMAE clip of the last K frames).
What the critic sees: the same, plus privileged sim state when ``critic_privileged`` (asymmetric
actor-critic; see tasks.privileged_state).

Actions: from scratch, a joint delta ``state + a * action_scale_deg``; residual, ``base + a *
action_scale_deg`` per control step, with the actor's last layer zero-initialized so the first policy is the
base itself. The base is never updated (its parameters are frozen and in no optimizer).
:class:`Agent` satisfies ``RolloutPolicy`` (``reset``/``select_action``), so the evaluation harness runs
it as it runs any policy, in this process.
"""

from __future__ import annotations

import collections
import copy
import math
from typing import Any

import torch
from torch import nn

from actlab.errors import ActlabError
from actlab.rl.config import RLConfig
from actlab.rl.networks import Actor, CNNEncoder, Critics, FrozenFeatures, VideoFeatures, ViTFeatures
from actlab.rl.tasks import GOAL_KEY, STATE_SCALE, privileged_dim

STATE_KEY = "observation.state"
ACT_DIM = 6  # SO-101: five arm joints and the gripper


def camera_key(camera: str) -> str:
    return camera if camera.startswith("observation.images.") else f"observation.images.{camera}"


class Agent(nn.Module):
    """Actor, critic ensemble, target critics, temperature and encoders of one SAC run."""

    def __init__(self, cfg: RLConfig, base: Any | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.base = base
        if base is not None:
            for p in base.parameters():
                p.requires_grad_(False)
            base.eval()
        vec = ACT_DIM + (3 if cfg.env.task == "reach" else 0) + (ACT_DIM if base is not None else 0)
        self.encoder: nn.Module | None = None
        self.frozen: FrozenFeatures | ViTFeatures | VideoFeatures | None = None
        if cfg.obs.encoder == "cnn":
            self.encoder = CNNEncoder(3 * len(cfg.obs.cameras) * cfg.obs.frame_stack, cfg.obs.image_size)
            img = self.encoder.out_dim
        elif cfg.obs.encoder == "frozen":
            self.frozen = FrozenFeatures(base, self.image_keys)
            vec += self.frozen.out_dim
            img = 0
        elif cfg.obs.encoder == "vit" and cfg.obs.vision_backbone == "videomae":
            self.frozen = VideoFeatures(cfg, self.image_keys)  # one clip of the last K frames per step
            vec += self.frozen.out_dim
            img = 0
        elif cfg.obs.encoder == "vit":
            self.frozen = ViTFeatures(cfg, self.image_keys)
            vec += self.frozen.out_dim * cfg.obs.frame_stack
            img = 0
        else:
            img = 0
        self.vec_dim = vec
        priv = privileged_dim(cfg.env.task) if cfg.critic_privileged else 0
        init_log_std = math.log(cfg.sac.init_std)
        self.actor = Actor(
            vec + img, ACT_DIM, cfg.sac.hidden, zero_init=base is not None, init_log_std=init_log_std
        )
        self.critics = Critics(vec + img + priv, ACT_DIM, cfg.sac.hidden, cfg.sac.num_critics)
        self.target_critics = copy.deepcopy(self.critics).requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.tensor(float(cfg.sac.init_alpha)).log())
        self._frames: collections.deque | None = None
        # residual RL: the residual's bound as a fraction of env.action_scale_deg (the guard widens and
        # narrows it; 0 makes the agent the base exactly). A plain attribute, saved in the guard's state.
        self.bound = 1.0
        # residual RL: the weight of the residual-size term in the actor's loss (residual.penalty; 0 for a
        # weak base, which the guard decides once the base is measured)
        self.penalty = float(cfg.residual.penalty)

    def transition_bytes(self) -> int:
        """Bytes of one replay row as :class:`actlab.rl.envs.VecSim` fills it: ``vec`` (float32), ``img``
        (uint8, 3 channels x cameras x frame_stack, with the CNN), ``priv`` (float32, privileged critic),
        each also as ``next_``; the action (6 float32), the n-step reward and the discount. Known before
        any episode runs (the disk check of ``rl train`` refuses before anything is written)."""
        cfg = self.cfg
        obs = 4 * self.vec_dim
        if self.encoder is not None:
            obs += 3 * len(cfg.obs.cameras) * cfg.obs.frame_stack * cfg.obs.image_size**2
        if cfg.critic_privileged:
            obs += 4 * privileged_dim(cfg.env.task)
        return 2 * obs + 4 * ACT_DIM + 4 + 4

    # ------------------------------------------------------------------------------- what the env gives
    @property
    def image_keys(self) -> list[str]:
        """Camera observation keys the agent reads: the base's cameras (frozen) or ``cfg.obs.cameras``."""
        if self.cfg.obs.encoder == "frozen":
            return list(self.base.camera_keys)
        return [camera_key(c) for c in self.cfg.obs.cameras]

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """Every tensor a checkpoint must hold (the base is excluded: it is a file the config names)."""
        return {k: v for k, v in self.state_dict().items() if not k.startswith(("base.", "frozen."))}

    def load_trainable_state(self, state: dict[str, torch.Tensor], file: Any) -> None:
        """Load what :meth:`trainable_state` saved, strictly: every key present, none extra, every shape
        the same (the frozen base and features are not in ``state``: they come from their own files).
        ``file`` is named in the refusal."""
        want = self.trainable_state()
        missing = sorted(set(want) - set(state))
        extra = sorted(set(state) - set(want))
        shapes = sorted(k for k in set(want) & set(state) if tuple(want[k].shape) != tuple(state[k].shape))
        if missing or extra or shapes:
            found = []
            for label, keys in (("missing", missing), ("unexpected", extra), ("other shape", shapes)):
                more = f" and {len(keys) - 8} more" if len(keys) > 8 else ""
                if keys:
                    found.append(f"{label}: {', '.join(keys[:8])}{more}")
            raise ActlabError(
                "the agent weights do not match the agent this config builds",
                file=file,
                expected=f"the {len(want)} tensors of an agent with this RL config",
                found="; ".join(found),
                fix="use the config the checkpoint was written with (its rl_config.json), or a checkpoint "
                "written by actlab rl train",
            )
        self.load_state_dict({**self.state_dict(), **state}, strict=True)

    def observe(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One control step's actor inputs from a policy batch (images (B, C, H, W) uint8, state (B, 6)):
        ``vec`` (B, D) float, ``img`` (B, 3*cams*K, H, W) uint8 with a CNN, ``base`` (B, 6) deg residual.
        Stateful (the base's action queue, the frame stack): call once per control step."""
        state = batch[STATE_KEY].float()  # (B, 6) deg
        parts = [state / STATE_SCALE]
        out: dict[str, torch.Tensor] = {"state": state}
        if self.cfg.env.task == "reach":
            parts.append(batch[GOAL_KEY].float())
        if self.base is not None:
            with torch.no_grad():
                base_action = torch.as_tensor(self.base.select_action(batch)).float()  # (B, 6) deg
            out["base"] = base_action
            parts.append(base_action / STATE_SCALE)
        if isinstance(self.frozen, VideoFeatures):  # the clip of the last K frames, once per env step
            parts.append(self.frozen(self._stack(torch.cat([batch[k] for k in self.image_keys], dim=1))))
        elif self.frozen is not None:
            feats = self.frozen(batch)  # (B, F): once per env step, stored, never recomputed
            parts.append(self._stack(feats) if self.cfg.obs.encoder == "vit" else feats)  # (B, K*F) for a ViT
        out["vec"] = torch.cat(parts, dim=-1)
        if self.encoder is not None:
            out["img"] = self._stack(torch.cat([batch[k] for k in self.image_keys], dim=1))
        return out

    def _stack(self, frame: torch.Tensor) -> torch.Tensor:
        """(B, X, ...) of this step -> the last K steps' on axis 1 (the first repeated at reset): frames
        (B, 3*cams, H, W) for the CNN, ViT features (B, F) (each frame encoded once, when it arrives)."""
        k = self.cfg.obs.frame_stack
        if self._frames is None or self._frames[0].shape != frame.shape:
            self._frames = collections.deque([frame] * k, maxlen=k)
        else:
            self._frames.append(frame)
        return torch.cat(list(self._frames), dim=1)

    # ------------------------------------------------------------------------------------ the networks
    def actor_input(self, vec: torch.Tensor, img: torch.Tensor | None) -> torch.Tensor:
        """The actor's input: images enter through the encoder, detached (only the critic trains it)."""
        if self.encoder is None or img is None:
            return vec
        return torch.cat([vec, self.encoder(img).detach()], dim=-1)

    def critic_input(
        self, vec: torch.Tensor, img: torch.Tensor | None, priv: torch.Tensor | None, grad: bool = True
    ) -> torch.Tensor:
        parts = [vec]
        if self.encoder is not None and img is not None:
            feats = self.encoder(img)
            parts.append(feats if grad else feats.detach())
        if self.cfg.critic_privileged and priv is not None:
            parts.append(priv)
        return torch.cat(parts, dim=-1)

    def bounded(self, action: torch.Tensor) -> torch.Tensor:
        """The actor's [-1, 1] action scaled by the residual's bound (residual RL; unchanged otherwise):
        what is executed, stored in the replay buffer and valued by the critics."""
        return action * self.bound if self.base is not None else action

    def env_action(self, obs: dict[str, torch.Tensor], action: torch.Tensor) -> torch.Tensor:
        """[-1, 1] actions (B, 6) -> joint targets (B, 6) deg: residual on the base, else a joint delta."""
        anchor = obs["base"] if "base" in obs else obs["state"]
        return anchor + action.to(anchor.dtype) * self.cfg.env.action_scale_deg

    # ------------------------------------------------------------------------------- RolloutPolicy API
    def reset(self) -> None:
        """Forget the episode: the base's action queue and the frame stack."""
        if self.base is not None:
            self.base.reset()
        self._frames = None

    @torch.no_grad()
    def select_action(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Deterministic (mean) action, joint targets (B, 6) deg: what evaluation runs."""
        o = self.observe(obs)
        a, _ = self.actor(self.actor_input(o["vec"], o.get("img")), deterministic=True)
        return self.env_action(o, self.bounded(a))

    @property
    def features(self) -> dict[str, Any]:
        """The inputs evaluation must provide (LeRobot-style features; images HWC)."""
        feats: dict[str, Any] = {STATE_KEY: {"dtype": "float32", "shape": [ACT_DIM]}}
        if self.cfg.env.task == "reach":
            feats[GOAL_KEY] = {"dtype": "float32", "shape": [3]}
        if self.base is not None:
            feats.update({k: v for k, v in self.base.features.items() if k.startswith("observation.")})
        for k in self.image_keys:
            if k not in feats:
                s = self.cfg.obs.image_size
                feats[k] = {"dtype": "video", "shape": [s, s, 3]}
        return feats
