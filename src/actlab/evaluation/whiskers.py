"""Whiskers: draw where the policy's predicted action chunks would take the gripper.

At every ``every``-th step of one episode the policy's action chunk is predicted
(``policy.predict_action_chunk``), forward-simulated from a copy of the simulator state without rendering
(``env.forecast_grasp_positions``: set_state, step the physics, record the grasp point, restore), and the
predicted grasp-point path is projected into the camera (``env.project``). Each frame shows the current
prediction bright, the previous ``history`` ones fading, and the path the gripper actually took in another
colour. Divergence between what the policy predicts and what then happens (jitter between consecutive
chunks, a chunk aimed past the cube) is visible at a glance.

Needs an env with ``forecast_grasp_positions``, ``grasp_position``, ``project`` and ``render(camera,
size)`` (actlab's sim) and a policy with ``predict_action_chunk``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from actlab.errors import ActlabError
from actlab.evaluation.envs import EnvSpec, env_fps, env_max_steps, make_eval_env
from actlab.evaluation.policy_io import ObsAdapter, actions_to_numpy, policy_inputs
from actlab.evaluation.rollout import kept_info, near_goal_radius
from actlab.evaluation.sources import as_source, source_inputs, spec_for_inputs, threads_for_load
from actlab.evaluation.taxonomy import PhaseRecord, classify
from actlab.evaluation.video import VIDEO_HOLD_S, draw_text, outcome_text, write_video
from actlab.policies.contract import RolloutPolicy
from actlab.utils.io import write_png
from actlab.utils.progress import progress_bar
from actlab.utils.threads import torch_threads

# Colours chosen against the sim's palette (grey table, blue bowl, red cube, yellow-and-black arm).
CURRENT = (40, 255, 40)  # newest predicted path: bright green with a black outline
PAST = (40, 255, 40)  # older predictions: the same green, fading with age
ACTUAL = (255, 0, 255)  # the path the grasp point really took: magenta
OUTLINE = (0, 0, 0)

ENV_API = ("forecast_grasp_positions", "grasp_position", "project", "render")
# Keyword arguments of whiskers_video that run_eval passes through (its ``whiskers`` dict).
WHISKER_OPTIONS = ("episode", "every", "style", "still")


@dataclass(frozen=True)
class WhiskerStyle:
    """How whiskers are drawn."""

    history: int = 8  # previous predictions shown, fading
    size: int = 384  # rendered frame side (pixels)
    camera: str = "top"  # camera the paths are drawn in
    width: int = 3  # line width of the current prediction (pixels)

    def __post_init__(self) -> None:
        for name, low in (("history", 0), ("size", 16), ("width", 1)):
            if getattr(self, name) < low:
                raise ActlabError(
                    f"whisker {name} too small", field=name, expected=f">= {low}", found=getattr(self, name)
                )


def _segments(pixels: np.ndarray) -> list[list[tuple[float, float]]]:
    """Split a (N, 2) pixel path at NaNs (points behind the camera) into drawable polylines."""
    runs, cur = [], []
    for u, v in pixels:
        if np.isfinite(u) and np.isfinite(v):
            cur.append((float(u), float(v)))
        elif cur:
            runs.append(cur)
            cur = []
    if cur:
        runs.append(cur)
    return runs


def draw_whiskers(
    frame: np.ndarray,
    predictions: list[np.ndarray],
    actual: np.ndarray | None,
    style: WhiskerStyle = WhiskerStyle(),
) -> np.ndarray:
    """Draw pixel paths on an HWC frame: ``predictions`` oldest first ((H, 2) each; the last is current,
    bright), older ones fading, and the ``actual`` path ((N, 2)) in another colour. Returns a new frame."""
    from PIL import Image, ImageDraw

    base = Image.fromarray(np.ascontiguousarray(frame)).convert("RGBA")
    layer = Image.new("RGBA", base.size, (0, 0, 0, 0))
    draw = ImageDraw.Draw(layer)
    w = style.width
    if actual is not None:
        for run in _segments(actual):
            if len(run) > 1:
                draw.line(run, fill=(*ACTUAL, 255), width=w, joint="curve")
    older = predictions[:-1][-style.history :] if predictions else []
    for age, path in enumerate(reversed(older), start=1):
        alpha = int(200 * (1 - age / (style.history + 1)))
        for run in _segments(path):
            if len(run) > 1:
                draw.line(run, fill=(*PAST, alpha), width=max(1, w - 2), joint="curve")
    if predictions:
        for run in _segments(predictions[-1]):
            if len(run) > 1:
                draw.line(run, fill=(*OUTLINE, 255), width=w + 2, joint="curve")
                draw.line(run, fill=(*CURRENT, 255), width=w, joint="curve")
            end = run[-1]
            draw.ellipse(
                [end[0] - w, end[1] - w, end[0] + w, end[1] + w], fill=(*CURRENT, 255), outline=OUTLINE
            )
    return np.asarray(Image.alpha_composite(base, layer).convert("RGB"))


def check_whiskers_options(
    options: Mapping[str, Any], spec: EnvSpec, execution: Any = None, episodes: int | None = None
) -> None:
    """Refuse bad whiskers options up front: the whiskers video is made after the whole evaluation, and a
    late error would throw the evaluation away. ``execution``: the evaluation's ExecutionSpec (None: sync);
    the whiskers episode runs each step's action from ``select_action`` (sync), so a real-time execution
    is refused rather than filmed as something it is not (it was, without a word). ``episodes``: the
    evaluation's episode count; the filmed episode is one of them (``--whiskers-episode 5 --episodes 1``
    filmed seed +5, an episode the evaluation never ran and whose seed nothing checked against the
    training seeds)."""
    mode = getattr(execution, "mode", "sync")
    if mode != "sync":
        raise ActlabError(
            f"whiskers film the episode in sync execution, not --execution {mode}",
            field="--whiskers",
            expected="--execution sync (the default) with --whiskers",
            found=f"--execution {mode} --latency {getattr(execution, 'latency', 0)}",
            fix="run --whiskers in a separate evaluation without --execution/--latency; the real-time "
            "evaluation films its own episodes with --videos K (nothing was run)",
        )
    unknown = sorted(set(options) - set(WHISKER_OPTIONS))
    if unknown:
        raise ActlabError(
            "unknown whiskers option", field="whiskers", expected=", ".join(WHISKER_OPTIONS), found=unknown
        )
    if int(options.get("every", 1)) < 1:
        raise ActlabError("every must be >= 1", field="--whiskers-every", found=options["every"])
    if int(options.get("episode", 0)) < 0:
        raise ActlabError("episode index must be >= 0", field="--whiskers-episode", found=options["episode"])
    if episodes is not None and int(options.get("episode", 0)) >= episodes:
        raise ActlabError(
            "the whiskers episode is not one of the evaluation's episodes",
            field="--whiskers-episode",
            expected=f"an index among 0..{episodes - 1} (--episodes {episodes})",
            found=options["episode"],
            fix=f"pass --whiskers-episode {episodes - 1} or lower, or more --episodes (nothing was run)",
        )
    if spec.is_peer:
        raise ActlabError(
            "whiskers need an env that can forward-simulate and project the grasp point",
            field="--whiskers",
            expected="actlab's sim (" + ", ".join(ENV_API) + ")",
            found=spec.task,
            fix="use --task so101_pick_place for whiskers",
        )


def _numpy(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=np.float32)


def _check_env(env: Any) -> None:
    missing = [name for name in ENV_API if not hasattr(env, name)]
    if missing:
        raise ActlabError(
            "whiskers need an env that can forward-simulate and project the grasp point",
            field="--whiskers",
            expected="actlab's sim (" + ", ".join(ENV_API) + ")",
            found=f"{type(env).__name__} without {', '.join(missing)}",
            fix="use --task so101_pick_place for whiskers",
        )


def _build_policy(source: Any, env: Any, device: str) -> RolloutPolicy:
    if source.factory is not None:
        return source.factory(env)
    if source.obj is not None:
        return source.obj
    # lazy: bundles load torch; evaluation imports without it (the scripted expert needs none)
    from actlab.policies import load_policy

    return load_policy(source.path, device=device)


def whiskers_video(
    source: Any,
    spec: EnvSpec,
    cfg: Any,  # an EvalConfig (seed, device, execution, threads_per_worker, workers)
    path: str | Path,
    episode: int = 0,
    every: int = 1,
    style: WhiskerStyle | None = None,
    still: bool = True,
) -> dict:
    """Roll out episode ``episode`` (seed ``cfg.seed + episode``) of ``source`` and write a whiskers mp4.

    With ``still``, the frame whose current prediction travels furthest (the most telling one, usually
    the carry toward the goal) is also written losslessly as a PNG beside the video (same name, ``.png``)
    for reports; the return dict names it as ``still``.

    ``source``: a PolicySource (or anything ``as_source`` accepts). Returns a dict with the outcome, the
    number of steps and predictions, and the mean distance (m) between each prediction's first point and
    where the grasp point really was one step later: 0 when the executed action is the chunk's first
    action (the forward simulation is exact), larger when the policy executes an older chunk's actions.
    """
    # the rollouts' rule: one thread on a busy CPU (said by the evaluation this pass belongs to)
    threads = threads_for_load(cfg, note=False).threads_per_worker
    with torch_threads(threads):
        info = _whiskers_video(source, spec, cfg, path, episode, every, style, still)
    return info


def _whiskers_video(source, spec, cfg, path, episode, every, style, still) -> dict:
    if every < 1:
        raise ActlabError("every must be >= 1", field="--whiskers-every", found=every)
    style = style or WhiskerStyle()
    source = as_source(source)
    inputs = source_inputs(source)
    env = make_eval_env(spec_for_inputs(spec, inputs))
    try:
        _check_env(env)
        return _episode(source, spec, cfg, env, inputs, path, episode, every, style, still)
    finally:
        close = getattr(env, "close", None)
        if close is not None:
            close()


def _episode(source, spec, cfg, env, inputs, path, episode, every, style, still) -> dict:
    import torch

    policy = _build_policy(source, env, cfg.device)
    if not hasattr(policy, "predict_action_chunk"):
        raise ActlabError(
            "whiskers need a policy that predicts action chunks",
            field="--whiskers",
            expected="a policy with predict_action_chunk(obs) -> (B, H, A)",
            found=type(policy).__name__,
        )
    adapter = ObsAdapter(policy_inputs(policy) or inputs, cfg.device)
    seed = cfg.seed + episode
    torch.manual_seed(seed)
    policy.reset()
    obs, _ = env.reset(seed=seed, options=spec.reset_options)
    radius = near_goal_radius(env)
    preds_world: list[np.ndarray] = []
    actual = [env.grasp_position()]
    infos, raw_frames, errors = [], [], []
    frame_preds: list[int] = []  # per frame: index of the newest prediction drawn on it
    # A bar: this episode re-renders every frame with its predictions (10-40 s on 2 CPU cores), and it ran
    # after the evaluation's own bar had finished, in silence.
    bar = progress_bar(env_max_steps(env), f"whiskers ({source.name}, episode {episode})", "step")
    for t in range(env_max_steps(env)):
        bar.update(1)
        batch = adapter([obs])
        if t % every == 0:
            with torch.inference_mode():
                chunk = _numpy(policy.predict_action_chunk(batch))[0]  # (H, A)
            preds_world.append(env.forecast_grasp_positions(chunk))  # (H, 3) world
        raw_frames.append(_frame(env, preds_world, actual, style))
        frame_preds.append(len(preds_world) - 1)
        with torch.inference_mode():
            action = actions_to_numpy(policy.select_action(batch), 1)[0]
        obs, _, terminated, truncated, info = env.step(action)
        actual.append(env.grasp_position())
        infos.append(kept_info(info, radius))
        if t % every == 0:
            errors.append(float(np.linalg.norm(preds_world[-1][0] - actual[-1])))
        if terminated or truncated:
            break
    bar.close()
    raw_frames.append(_frame(env, preds_world, actual, style))
    frame_preds.append(len(preds_world) - 1)
    outcome = classify(PhaseRecord.from_infos(infos)).outcome
    header = f"{source.name}  ep {episode}  seed {seed}"
    legend = "green: predicted  magenta: actual"
    # As in rollout videos: SUCCESS from the frame the env first reports it, the final outcome on the
    # last frame, held for VIDEO_HOLD_S.
    first = next((t + 1 for t, info in enumerate(infos) if info.get("is_success")), len(raw_frames))
    ok_text, ok_color = outcome_text("success")
    frames = [
        draw_text(
            f,
            top=f"{header}  step {i}",
            bottom=ok_text if i >= first else None,
            bottom_color=ok_color,
            bottom_right=legend,
        )
        for i, f in enumerate(raw_frames)
    ]
    text, color = outcome_text(outcome)
    top = f"{header}  step {len(infos)}, ended"
    end = draw_text(raw_frames[-1], top=top, bottom=text, bottom_color=color, bottom_right=legend)
    fps = env_fps(env)
    write_video(path, [*frames[:-1], *[end] * (1 + round(VIDEO_HOLD_S * fps))], fps)
    still_path = None
    if still:
        still_path = Path(path).with_suffix(".png")
        write_png(still_path, frames[_telling_frame(frame_preds, preds_world)])
    return {
        "path": str(path),
        "still": None if still_path is None else str(still_path),
        "outcome": outcome,
        "steps": len(infos),
        "predictions": len(preds_world),
        "first_step_error_m": float(np.mean(errors)) if errors else None,
    }


def _telling_frame(frame_preds: list[int], preds_world: list[np.ndarray]) -> int:
    """Index of the frame whose newest predicted path is longest (ties: the earliest such frame)."""
    lengths = [float(np.linalg.norm(np.diff(p, axis=0), axis=1).sum()) for p in preds_world]  # (m,)
    return int(np.argmax([lengths[i] for i in frame_preds]))


def _frame(
    env: Any, preds_world: list[np.ndarray], actual: list[np.ndarray], style: WhiskerStyle
) -> np.ndarray:
    image = env.render(camera=style.camera, size=style.size)
    recent = preds_world[-(style.history + 1) :]
    preds_px = [env.project(p, camera=style.camera, size=style.size) for p in recent]
    actual_px = env.project(np.asarray(actual), camera=style.camera, size=style.size)
    return draw_whiskers(image, preds_px, actual_px, style)
