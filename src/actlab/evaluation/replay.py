"""Open-loop replay of recorded episodes through a policy, and the numbers the policy doctor judges.

At every replayed frame the policy predicts a chunk from the recorded observation; the chunk is compared
with the recorded actions at that frame and the following ones. Everything after
:func:`replay_episodes` is plain numpy on the arrays it returns (tested alone):

- :func:`chunk_errors`, :func:`replay_summary`: per-joint errors of the first action and of the whole
  chunk, in dataset std units, for the policy and for two baselines on the same frames (hold the current
  state; the dataset's mean action), and the *skill*: the policy's chunk error over the better
  baseline's (1 = baseline level, 0 = exact);
- :func:`range_stats`: predicted actions outside the dataset's q01..q99;
- :func:`gripper_stats`: open/close state and switch timing of a gripper joint;
- :func:`jump_stats`: the jump between consecutive chunks where execution switches to the next one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from actlab.errors import ActlabError
from actlab.evaluation.policy_io import resize_images

ACTION = "action"
STATE = "observation.state"


@dataclasses.dataclass
class EpisodeReplay:
    """Replay arrays of one episode (frames in order, ``stride`` apart)."""

    episode: int  # episode index in the dataset
    frames: np.ndarray  # (T,) global frame indices
    pred: np.ndarray  # (T, H, A) predicted chunks
    target: np.ndarray  # (T, H, A) recorded actions at t..t+H-1 (clamped at the episode end)
    valid: np.ndarray  # (T, H) bool, False where t+k is past the episode end
    state: np.ndarray  # (T, D) current state


def to_numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=np.float32)


def replay_episodes(
    policy: Any,
    data: Any,
    episodes: Sequence[tuple[int, int, int]],
    obs_keys: Sequence[str],
    resize: Mapping[str, tuple[tuple[int, int], bool]] | None = None,
    batch_size: int = 64,
    stride: int = 1,
) -> list[EpisodeReplay]:
    """Predict a chunk at every ``stride``-th frame of each ``(index, start, stop)`` episode.

    ``data`` gathers batches by global frame index (``DeviceData``: the policy's observation keys at its
    offsets, ``action`` at offsets ``0..H-1`` with ``action_is_pad``). ``resize`` maps a camera whose
    stored frames are not the trained size to ``((H, W), fit_pad)``: evaluation's resize
    (``policy_io.resize_images``), used only when the dataset's camera differs from the training one.
    ``policy.reset()`` is called before each episode, as evaluation does.
    """
    import torch

    out = []
    for index, start, stop in episodes:
        frames = np.arange(start, stop, stride, dtype=np.int64)
        policy.reset()
        parts: dict[str, list[np.ndarray]] = {"pred": [], "target": [], "valid": [], "state": []}
        for a in range(0, len(frames), batch_size):
            batch = data.gather(frames[a : a + batch_size])
            obs = {k: batch[k] for k in obs_keys}
            for key, (hw, fit_pad) in (resize or {}).items():
                obs[key] = resize_images(obs[key], hw, fit_pad=fit_pad)
            with torch.no_grad():
                parts["pred"].append(to_numpy(policy.predict_action_chunk(obs)))  # (B, H, A)
            parts["target"].append(to_numpy(batch[ACTION]))  # (B, H, A)
            parts["valid"].append(~batch[f"{ACTION}_is_pad"].cpu().numpy())  # (B, H)
            n = len(parts["pred"][-1])
            state = to_numpy(batch[STATE]) if STATE in batch else np.zeros((n, 0), np.float32)
            parts["state"].append(state[:, -1] if state.ndim == 3 else state)  # (B, D): the current frame
        arrays = {k: np.concatenate(v) for k, v in parts.items()}
        if arrays["pred"].shape != arrays["target"].shape:
            _, h, a = arrays["target"].shape
            raise ActlabError(
                "the policy's chunks do not have the dataset's action shape",
                field="predict_action_chunk",
                expected=f"(B, {h}, {a})",
                found=f"(B, {arrays['pred'].shape[1]}, {arrays['pred'].shape[2]})",
                fix="the policy was built for another action size or chunk size",
            )
        out.append(EpisodeReplay(int(index), frames, **arrays))
    return out


def chunk_errors(
    pred: np.ndarray, target: np.ndarray, valid: np.ndarray, scale: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Absolute errors in ``scale`` units: of the first action ``(N, A)`` and the mean over the valid chunk
    steps ``(N, A)``."""
    err = np.abs(pred - target) / scale  # (N, H, A)
    w = valid[..., None].astype(np.float64)  # (N, H, 1)
    chunk = (err * w).sum(1) / np.maximum(w.sum(1), 1.0)  # (N, A)
    return err[:, 0], chunk


def replay_summary(
    reps: Sequence[EpisodeReplay], action_mean: np.ndarray, scale: np.ndarray, hold: bool
) -> dict[str, Any]:
    """Errors of the policy and of the baselines (per joint, and the mean over joints) and the skill.

    ``hold``: also the hold-the-state baseline (only meaningful when the state and the action are the
    same joints, as for position-controlled arms).
    """
    pred = np.concatenate([r.pred for r in reps])  # (N, H, A)
    target = np.concatenate([r.target for r in reps])
    valid = np.concatenate([r.valid for r in reps])
    rows = {"policy": pred, "mean": np.broadcast_to(action_mean, pred.shape)}
    if hold:
        state = np.concatenate([r.state for r in reps])[:, None, : pred.shape[2]]  # (N, 1, A)
        rows["hold"] = np.broadcast_to(state, pred.shape)
    out: dict[str, Any] = {"episodes": [r.episode for r in reps], "frames": len(pred)}
    for name, p in rows.items():
        first, chunk = chunk_errors(p, target, valid, scale)
        out[name] = {
            "first": first.mean(0).round(5).tolist(),
            "chunk": chunk.mean(0).round(5).tolist(),
            "first_mean": float(first.mean()),
            "chunk_mean": float(chunk.mean()),
        }
    baselines = [k for k in ("hold", "mean") if k in out]
    best = min(baselines, key=lambda k: out[k]["chunk_mean"])
    out["baseline"] = best
    out["skill"] = out["policy"]["chunk_mean"] / max(out[best]["chunk_mean"], 1e-9)
    best_first = min(out[k]["first_mean"] for k in baselines)
    out["skill_first"] = out["policy"]["first_mean"] / max(best_first, 1e-9)
    return out


def range_stats(reps: Sequence[EpisodeReplay], q01: np.ndarray, q99: np.ndarray, margin: float) -> dict:
    """Fraction of predicted actions (every chunk step) per joint outside ``q01..q99`` widened by
    ``margin`` times the span."""
    pred = np.concatenate([r.pred for r in reps]).reshape(-1, reps[0].pred.shape[-1])  # (N*H, A)
    lo, hi = np.asarray(q01, float), np.asarray(q99, float)
    pad = margin * (hi - lo) + 1e-6
    out = ((pred < lo - pad) | (pred > hi + pad)).mean(0)  # (A,)
    return {
        "out_of_range": out.round(4).tolist(),
        "worst": int(np.argmax(out)),
        "q01": lo.round(4).tolist(),
        "q99": hi.round(4).tolist(),
        "pred_min": pred.min(0).round(4).tolist(),
        "pred_max": pred.max(0).round(4).tolist(),
    }


def _switches(x: np.ndarray) -> list[tuple[int, bool]]:
    """(position, new value) of every change of a boolean sequence."""
    at = np.flatnonzero(x[1:] != x[:-1]) + 1
    return [(int(i), bool(x[i])) for i in at]


def gripper_stats(reps: Sequence[EpisodeReplay], joint: int, threshold: float, window: int) -> dict[str, Any]:
    """Open/close behaviour of action ``joint`` on the first actions, split at ``threshold``.

    ``recorded_high`` / ``predicted_high``: fraction of frames above the threshold. Each recorded switch
    is matched to the nearest predicted switch of the same direction within ``window`` replayed frames;
    ``lags`` are those distances (in replayed frames), ``missed`` the switches without one.
    """
    rec = np.concatenate([r.target[:, 0, joint] for r in reps]) > threshold
    pred = np.concatenate([r.pred[:, 0, joint] for r in reps]) > threshold
    lags, missed, total = [], 0, 0
    for r in reps:
        got = _switches(r.pred[:, 0, joint] > threshold)
        for pos, rising in _switches(r.target[:, 0, joint] > threshold):
            total += 1
            near = [abs(p - pos) for p, up in got if up == rising and abs(p - pos) <= window]
            if near:
                lags.append(min(near))
            else:
                missed += 1
    return {
        "threshold": float(threshold),
        "recorded_high": float(rec.mean()),
        "predicted_high": float(pred.mean()),
        "switches": total,
        "missed": missed,
        "lags": lags,
    }


def jump_stats(reps: Sequence[EpisodeReplay], n_exec: int, stride: int, scale: np.ndarray) -> dict | None:
    """Where execution switches chunks every ``n_exec`` steps: the mean step (in ``scale`` units) from
    the last executed action of the chunk at ``t`` to the first action of the chunk at ``t + n_exec``,
    and the mean step between consecutive executed actions inside a chunk. None when the replayed
    frames do not contain such pairs (``stride`` not dividing ``n_exec``, or chunks of one action)."""
    horizon = reps[0].pred.shape[1]
    if n_exec % stride or horizon < 2:
        return None
    k, last = n_exec // stride, min(n_exec, horizon) - 1
    jumps, steps = [], []
    for r in reps:
        p = r.pred / scale  # (T, H, A)
        steps.append(np.abs(np.diff(p[:, : last + 1], axis=1)).reshape(-1))
        if len(p) > k:
            jumps.append(np.abs(p[k:, 0] - p[:-k, last]).reshape(-1))
    if not jumps:
        return None
    jump, step = float(np.concatenate(jumps).mean()), float(np.concatenate(steps).mean())
    return {"boundary_jump": jump, "within_chunk_step": step, "ratio": jump / max(step, 1e-9)}
