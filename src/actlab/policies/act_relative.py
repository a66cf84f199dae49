"""ACT with relative actions, state deltas and real-time-chunking prefix conditioning (Black et al. 2025).

- Relative actions: the model predicts ``rel[k] = a[t+k] - s[t]`` for every joint except
  ``absolute_action_dims`` (the gripper stays absolute), normalized with statistics of the relative values
  (``stats["action.relative"]``, per chunk position by default). Outputs are converted back with the state
  the chunk was predicted from.
- State delta (``obs_state_delta_frames = N``): an extra token from ``s[t] - s[t-N]`` normalized with
  ``stats["observation.state.delta"]``. The sampler fetches state offsets ``[-N, 0]``; at inference the
  policy keeps the past states itself between ``select_action`` calls (clamped to the first state of the
  episode, exactly like the sampler clamps at the episode start).
- RTC prefix (``rtc_max_delay = M > 0``): ``M`` extra tokens. In training, ``d`` is drawn uniformly from
  ``[0, M]`` per example and slot ``j < d`` carries the ``j``-th true (normalized relative) action, the others
  a learned pad token. At inference ``predict_action_chunk(obs, prefix)`` takes the committed absolute
  actions ``(B, d, A)`` that the robot executes while this chunk is computed, re-expresses them against
  the current state, and returns a chunk whose first ``d`` actions are exactly the committed ones.
"""

from __future__ import annotations

import collections
import warnings
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from actlab.errors import ActlabError
from actlab.policies.act import ACTION, STATE, ACTPolicy, last_frame
from actlab.policies.configs import ACTRelativeConfig
from actlab.policies.normalize import mean_std

REL = "action.relative"
DELTA = "observation.state.delta"


def to_relative(actions: torch.Tensor, state: torch.Tensor, relative_mask: torch.Tensor) -> torch.Tensor:
    """Absolute actions (B, H, A) -> relative to ``state`` (B, A) where ``relative_mask`` (A,) is True."""
    return torch.where(relative_mask, actions - state.unsqueeze(-2), actions)


def to_absolute(relative: torch.Tensor, state: torch.Tensor, relative_mask: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`to_relative`: relative (B, H, A) + ``state`` (B, A) on the relative dims."""
    return torch.where(relative_mask, relative + state.unsqueeze(-2), relative)


class ACTRelativePolicy(ACTPolicy):
    """ACT predicting state-relative action chunks, with optional state delta and RTC prefix tokens."""

    config_class = ACTRelativeConfig
    config: ACTRelativeConfig

    def __init__(
        self,
        config: ACTRelativeConfig,
        features: dict[str, Any],
        stats: dict[str, Any],
        pretrained: bool = True,
    ) -> None:
        super().__init__(config, features, stats, pretrained)
        n = config.obs_state_delta_frames
        self._state_history: collections.deque = collections.deque(maxlen=n or 1)

    # ------------------------------------------------------------------------------------------ build
    def _validate_features(self) -> None:
        if self.state_dim != self.action_dim:
            raise ActlabError(
                "act_relative needs state and action of the same size (joint positions and joint targets)",
                field="observation.state / action",
                expected="equal shapes",
                found=f"state {self.state_dim}, action {self.action_dim}",
                fix="use the act policy for this dataset",
            )
        bad = [d for d in self.config.absolute_action_dims if d >= self.action_dim]
        if bad:
            raise ActlabError(
                "absolute_action_dims names dimensions the action does not have",
                field="absolute_action_dims",
                expected=f"indices < {self.action_dim}",
                found=list(self.config.absolute_action_dims),
                fix="set absolute_action_dims to the gripper indices of this robot (or [] for none)",
            )
        names = self.features[ACTION].get("names")
        if isinstance(names, list) and len(names) == self.action_dim:
            grippers = [i for i, n in enumerate(names) if "gripper" in str(n).lower()]
            if grippers and set(grippers) != set(self.config.absolute_action_dims):
                # The default (5,) is the SO-101 gripper: on another robot a joint would stay absolute
                # and the grippers would become relative, silently.
                warnings.warn(
                    f"absolute_action_dims={list(self.config.absolute_action_dims)} but the action names put "
                    f"grippers at {grippers} ({', '.join(str(names[i]) for i in grippers)}); "
                    f"set policy.absolute_action_dims={grippers} unless this is intended",
                    stacklevel=3,
                )

    @property
    def n_extra_tokens(self) -> int:
        return int(self.config.obs_state_delta_frames is not None) + self.config.rtc_max_delay

    def stats_keys(self) -> list[str]:
        keys = [STATE, REL]
        if self.config.obs_state_delta_frames is not None:
            keys.append(DELTA)
        if self.config.correction_head:
            keys.append(ACTION)  # the head's residuals are in absolute action units
        if self.config.image_norm == "dataset":
            keys += self.camera_keys
        return keys

    def _normalizer_entries(self, stats: dict[str, Any]) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        cfg = self.config
        a = self.action_dim
        entries = {STATE: mean_std(stats, STATE, (self.state_dim,), cfg.std_floor)}
        if cfg.relative_stats_per_step:
            entries[REL] = mean_std(
                stats, REL, (cfg.chunk_size, a), cfg.std_floor, "mean_per_step", "std_per_step"
            )
        else:
            entries[REL] = mean_std(stats, REL, (a,), cfg.std_floor)
        if cfg.obs_state_delta_frames is not None:
            entries[DELTA] = mean_std(stats, DELTA, (self.state_dim,), cfg.std_floor)
        if cfg.correction_head:
            # The correction head reads and writes absolute actions (the executing chunk's), normalized
            # with the dataset's absolute action stats, whatever the chunk's own (relative) units.
            entries[ACTION] = mean_std(stats, ACTION, (self.action_dim,), cfg.std_floor)
        entries.update(self._image_entries(stats))
        return entries

    def _build_model(self) -> None:
        super()._build_model()
        cfg = self.config
        mask = torch.ones(self.action_dim, dtype=torch.bool)
        mask[list(cfg.absolute_action_dims)] = False
        self.register_buffer("relative_mask", mask, persistent=False)  # (A,) True = relative to the state
        if cfg.obs_state_delta_frames is not None:
            self.encoder_state_delta_input_proj = nn.Linear(self.state_dim, cfg.dim_model)
        if cfg.rtc_max_delay > 0:
            self.rtc_prefix_proj = nn.Linear(self.action_dim, cfg.dim_model)
            self.rtc_pad_embed = nn.Embedding(1, cfg.dim_model)  # learned token for unused prefix slots
            self.register_buffer("rtc_slots", torch.arange(cfg.rtc_max_delay), persistent=False)

    # ------------------------------------------------------------------------------------------ hooks
    def _current_state(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return last_frame(batch[STATE], 1)  # (B, D)

    def _action_targets(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        rel = to_relative(batch[ACTION], self._current_state(batch), self.relative_mask)  # (B, H, A)
        return self.normalizer.normalize(REL, rel)

    def _extra_tokens(
        self,
        batch: dict[str, torch.Tensor],
        targets: torch.Tensor | None,
        keep: torch.Tensor | None,
        prefix: torch.Tensor | None,
    ) -> torch.Tensor | None:
        tokens = []
        if self.config.obs_state_delta_frames is not None:
            tokens.append(self._delta_token(batch))  # (B, 1, D)
        if self.config.rtc_max_delay > 0:
            tokens.append(self._prefix_tokens(batch, targets, keep, prefix))  # (B, M, D)
        return torch.cat(tokens, dim=1) if tokens else None

    def _delta_token(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        s = batch[STATE]
        if s.ndim != 3 or s.shape[1] != 2:
            raise ActlabError(
                "act_relative with obs_state_delta_frames needs a state window",
                field=STATE,
                expected=f"(B, 2, D) at offsets {self.config.state_offsets()} (policy.delta_indices)",
                found=tuple(s.shape),
                fix="fetch observation.state with policy.delta_indices, or call select_action",
            )
        delta = s[:, 1] - s[:, 0]  # (B, D) s[t] - s[t-N]
        return self.encoder_state_delta_input_proj(self.normalizer.normalize(DELTA, delta))[:, None]

    def _prefix_tokens(
        self,
        batch: dict[str, torch.Tensor],
        targets: torch.Tensor | None,
        keep: torch.Tensor | None,
        prefix: torch.Tensor | None,
    ) -> torch.Tensor:
        """(B, M, D): committed actions in the first d slots, the learned pad token elsewhere."""
        m = self.config.rtc_max_delay
        state = self._current_state(batch)
        b = state.shape[0]
        if self.training and targets is not None:
            # A random committed length per example, drawn on the device (no host sync).
            d = torch.randint(0, m + 1, (b, 1), device=state.device)  # (B, 1)
            real = (self.rtc_slots[None] < d) & keep[:, :m]  # (B, M); padded steps never enter a prefix
            values = targets[:, :m]  # (B, M, A) normalized relative
        elif prefix is not None:
            d = prefix.shape[1]
            values = F.pad(self._normalized_prefix(prefix, state), (0, 0, 0, m - d))  # (B, M, A)
            real = (self.rtc_slots < d)[None].expand(b, m)
        else:  # inference (or a validation loss) without a committed prefix
            values = state.new_zeros(b, m, self.action_dim)
            real = torch.zeros(b, m, dtype=torch.bool, device=state.device)
        tokens = self.rtc_prefix_proj(values)  # (B, M, D)
        return torch.where(real[..., None], tokens, self.rtc_pad_embed.weight[0].to(tokens.dtype))

    def _normalized_prefix(self, prefix: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """Absolute committed actions (B, d, A) -> relative to the current state, normalized."""
        d = prefix.shape[1]
        rel = to_relative(prefix.to(state), state, self.relative_mask)  # (B, d, A), state's device/dtype
        e = self.normalizer.get(REL)
        mean, std = (e.mean[:d], e.std[:d]) if self.config.relative_stats_per_step else (e.mean, e.std)
        return (rel - mean) / std

    def _to_actions(
        self, pred: torch.Tensor, obs: dict[str, torch.Tensor], prefix: torch.Tensor | None = None
    ) -> torch.Tensor:
        rel = self.normalizer.unnormalize(REL, pred)  # (B, H, A)
        actions = to_absolute(rel, self._current_state(obs), self.relative_mask)
        if prefix is not None and prefix.shape[1] > 0:
            # RTC: the first d actions are the committed ones, exactly (they are executed regardless).
            actions = torch.cat([prefix.to(actions), actions[:, prefix.shape[1] :]], dim=1)
        return actions

    # ------------------------------------------------------------------------------------------ inference
    def _check_prefix(self, prefix: torch.Tensor | None) -> None:
        if prefix is None:
            return
        m = self.config.rtc_max_delay
        if m == 0:
            super()._check_prefix(prefix)
        if prefix.ndim != 3 or prefix.shape[1] > m or prefix.shape[2] != self.action_dim:
            raise ActlabError(
                "the RTC prefix has the wrong shape",
                field="prefix",
                expected=f"(B, d, {self.action_dim}) with d <= rtc_max_delay ({m})",
                found=tuple(prefix.shape),
                fix="pass the committed absolute actions for the inference latency (at most rtc_max_delay)",
            )

    def _state_window(self, state: torch.Tensor) -> torch.Tensor:
        """(B, D) current state -> (B, 2, D) [s[t-N], s[t]] from the states seen by select_action."""
        past = self._state_history[0] if self._state_history else state  # clamped like the sampler
        return torch.stack([past.to(state.dtype), state], dim=1)

    def _observation(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if self.config.obs_state_delta_frames is not None and obs[STATE].ndim == 2:
            return {**obs, STATE: self._state_window(obs[STATE])}
        return super()._observation(obs)

    @torch.no_grad()
    def select_action(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Next action (B, A); records the state so later chunks see the state delta."""
        if self.config.obs_state_delta_frames is not None and obs[STATE].ndim == 2:
            state = obs[STATE]
            obs = {**obs, STATE: self._state_window(state)}
            # After maxlen=N pushes, history[0] is exactly s[t-N] at the next-but-N call.
            self._state_history.append(state.detach().clone())
        return super().select_action(obs)

    def reset(self) -> None:
        """Clear the action queue, the ensembler and the state history: call before every episode."""
        super().reset()
        self._state_history.clear()
