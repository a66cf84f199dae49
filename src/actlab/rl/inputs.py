"""The inputs of an RL run (``base``, ``demos``), checked before its run directory is touched (the
reward model too: ``actlab.rl.train`` loads it first).

The base bundle is copied into the run (``RUN/base``) and loaded from that copy; it used to be checked only
there, so ``--base RUN`` (a training run, not a bundle) or an export was refused as "RUN2/base is not a
bundle, its checkpoints are in RUN2/base/checkpoints" (the copy, not what was passed) and the copy stayed,
refusing the next start with the right ``--base`` as a different base. A reward model that was not one was
found after the base was copied and loaded (26 s on 2 cores). And a base or demonstrations recorded on
another sim task (so101_push) were used for pick-and-place without a word: residual RL trains on
``so101_pick_place`` only (``env.task = "pick_place"``).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from actlab.datasets.format import INFO_PATH, sim_seeds
from actlab.datasets.layout import read_info
from actlab.errors import ActlabError
from actlab.evaluation.seeds import check_trained_units, trained_task

# The sim task of env.task = "pick_place" (actlab.rl.evaluate evaluates on it).
RL_SIM_TASK = "so101_pick_place"


def check_inputs(cfg: Any, base_copied: bool) -> None:
    """Refuse a base that is no loadable bundle (unless the run already holds its copy: a resume), and a
    base or demonstrations recorded on another sim task."""
    check_encoder_task(cfg)
    policy = None
    if cfg.base is not None and not base_copied:
        policy = check_base(Path(cfg.base), cfg)
    if cfg.demos is not None:
        check_demos(Path(cfg.demos))
        if cfg.base is None or policy is not None:  # (a resume's base is its copy in the run: later)
            check_demos_size(cfg, policy)


def check_demos_size(cfg: Any, base: Any) -> None:
    """Demonstrations of another image size than the agent reads, refused before the run directory is
    made: the refusal came after the base was copied into it (RUN/base left, and taken by the next start;
    24th fault run's leftover). The agent's own image keys and features decide, as demo_buffer's check."""
    from actlab.datasets import open_dataset  # lazy: only demos are read here
    from actlab.rl.agent import Agent  # lazy: imports torch (the base was just loaded with it)
    from actlab.rl.demos import check_demo_image_size  # lazy: imports torch

    view = SimpleNamespace(cfg=cfg, base=base)
    view.image_keys = Agent.image_keys.fget(view)  # type: ignore[attr-defined]
    view.features = Agent.features.fget(view)  # type: ignore[attr-defined]
    ds = open_dataset(cfg.demos)
    try:
        if all(k in ds.features for k in view.image_keys):  # (a missing camera: demo_buffer names it)
            check_demo_image_size(view, ds, cfg.demos)
    finally:
        ds.close()


def check_encoder_task(cfg: Any) -> None:
    """An image encoder on ``reach``, whose envs render no camera: the run directory was made, then the
    first evaluation refused "the environment does not provide every observation the policy was trained
    on", fix "--task", which rl train has not (24th fault run, rl_cnn_top; the 23rd's check_base_cameras
    for a base)."""
    if cfg.env.task == "reach" and cfg.obs.encoder in ("cnn", "vit"):
        raise ActlabError(
            "the reach task renders no camera: an image encoder would have no frames to see",
            field="obs.encoder",
            expected="obs.encoder=none on reach, or env.task=pick_place (its envs render obs.cameras)",
            found=f"obs.encoder={cfg.obs.encoder}, obs.cameras={list(cfg.obs.cameras)}, env.task=reach",
            fix="--set env.task=pick_place, or leave obs.encoder at none (nothing was run or written)",
        )


def check_base(path: Path, cfg: Any = None) -> Any:
    """The bundle ``--base`` names, loaded once as it is (every check of load_policy names ``path``);
    returns the policy."""
    if not path.is_dir():
        raise ActlabError("base policy bundle not found", file=path, field="base", fix="check the path")
    from actlab.policies import load_policy  # lazy: imports torch

    policy = load_policy(path, device="cpu")
    check_base_task(path)
    if cfg is not None:
        check_base_cameras(path, list(getattr(policy, "camera_keys", None) or []), cfg)
    return policy


def check_base_cameras(path: Path, cameras: list[str], cfg: Any) -> None:
    """The envs render the base's cameras only with ``obs.encoder = frozen`` (else ``obs.cameras``): a
    camera policy as the base of `--preset smoke` trained a while, evaluated the base and was refused as
    "the environment does not provide every observation", fix "--task", which rl train has not (23rd
    fault run)."""
    if not cameras or cfg.obs.encoder == "frozen":
        return
    rendered = {
        c if c.startswith("observation.images.") else f"observation.images.{c}" for c in cfg.obs.cameras
    }
    missing = [k for k in cameras if k not in rendered]
    if missing:
        raise ActlabError(
            "the base policy reads cameras the RL envs would not render",
            file=path,
            field="obs.encoder",
            expected=f"obs.encoder=frozen (the envs then render the base's cameras: {', '.join(cameras)})",
            found=f"obs.encoder={cfg.obs.encoder}, obs.cameras={list(cfg.obs.cameras)}",
            fix="use --preset residual (residual RL on a frozen camera policy), or --set obs.encoder=frozen "
            "(nothing was run or written)",
        )


def check_base_task(path: Path) -> None:
    """A base trained on another sim task's recordings, or in other joint units than the sim's degrees
    (RL's envs run in degrees), is refused."""
    check_trained_units([SimpleNamespace(name=str(path), path=str(path))], "degrees", option="base")
    found = trained_task(path)
    if found is not None and found[0] != RL_SIM_TASK:
        raise ActlabError(
            f"the base policy was trained on {found[0]}; residual RL runs on {RL_SIM_TASK}",
            file=path,
            field="base",
            expected=f"a bundle trained on {RL_SIM_TASK} recordings",
            found=f"trained on {found[1]} ({found[0]})",
            fix=f"pass a base trained on {RL_SIM_TASK} (actlab sim record --task {RL_SIM_TASK})",
        )


def check_demos(path: Path) -> None:
    """Demonstrations recorded by ``actlab sim record`` say their task and units; another task's, or
    another unit's, are refused."""
    recorded = sim_seeds(read_info(path), Path(path) / INFO_PATH)
    if recorded is not None and recorded["task"] and recorded["task"] != RL_SIM_TASK:
        raise ActlabError(
            f"the demonstrations were recorded on {recorded['task']}; residual RL runs on {RL_SIM_TASK}",
            file=path,
            field="demos",
            expected=f"a dataset recorded on {RL_SIM_TASK}",
            found=recorded["task"],
            fix=f"pass demonstrations of {RL_SIM_TASK} (actlab sim record --task {RL_SIM_TASK})",
        )
    if recorded is not None and recorded["units"] != "degrees":
        raise ActlabError(
            f"the demonstrations are in joint units {recorded['units']}; RL's sim runs in degrees",
            file=path,
            field="demos",
            expected="a dataset recorded in degrees (actlab sim record's default units)",
            found=recorded["units"],
            fix="pass demonstrations recorded without --units",
        )


__all__ = [
    "RL_SIM_TASK",
    "check_base",
    "check_base_cameras",
    "check_base_task",
    "check_demos",
    "check_demos_size",
    "check_encoder_task",
    "check_inputs",
]
