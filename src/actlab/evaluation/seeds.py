"""Evaluation seeds, kept apart from the scenes a policy was trained on.

Episode ``i`` of an evaluation starts from ``env.reset(seed=SEED + i)``, and ``actlab sim record`` records
episode ``i`` of its attempts from ``seed + i`` with its own default seed 0. An evaluation that started at
seed 0 would therefore replay the demonstrations' own initial scenes (the scripted expert's actions at seeds
7 and 49 equal recorded episodes 7 and 49): success on training scenes, reported as if it were held out.

So the default evaluation seed starts far above any recording's attempts (the demo records 300
episodes from seed 0; a recording needs at most ``episodes * max_attempts_per_episode`` seeds), and an
evaluation whose seeds meet the scenes recorded in a bundle's training data is refused unless asked for.
A bundle trained by actlab carries the seeds of its dataset (``actlab.json``: extra.train.dataset.sim,
copied from the dataset's ``info.json`` when it was trained); an older bundle is checked against the
dataset it names when that dataset is still there and says its seeds.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from actlab.datasets.format import INFO_PATH, sim_seeds
from actlab.errors import ActlabError
from actlab.evaluation.sources import source_dir
from actlab.utils.io import read_json
from actlab.utils.kinds import BUNDLE_DAMAGED_FIX, EXPORT_BUNDLE

# The first seed of `actlab eval` and of EvalConfig: above every seed the sim recorder uses by default,
# and the seeds of the demo's checkpoint sweep, so `actlab eval runs/demo/run` repeats the demo's sweep.
DEFAULT_SEED = 100_000


def _bundle_sim_seeds(path: Path) -> tuple[dict[str, Any], str] | None:
    """(the recorder's {"task", "episode_seeds", "units"}, the dataset path) of a bundle's training data, if
    known (units None: a bundle that did not record them)."""
    meta_file = path / "actlab.json"
    if not meta_file.is_file():
        return None
    meta = read_json(meta_file, "bundle metadata", fix=BUNDLE_DAMAGED_FIX)
    dataset = ((meta.get("extra") or {}).get("train") or {}).get("dataset") or {}
    where = str(dataset.get("path") or "its training dataset")
    if dataset.get("sim") is not None:
        # the dataset's episode count, as training recorded it, holds the block to one seed per episode
        total = (
            (dataset.get("identity") or {}).get("episodes")
            if isinstance(dataset.get("identity"), dict)
            else None
        )
        block = sim_seeds(
            {"actlab_sim": dataset["sim"], "total_episodes": total},
            meta_file,
            BUNDLE_DAMAGED_FIX,
            "extra.train.dataset.sim",
        )
        if block and isinstance(dataset["sim"], dict) and "units" not in dataset["sim"]:
            block["units"] = None  # a bundle from before its units were recorded: not known
        return (block, where) if block else None
    if "sim" in dataset or not dataset.get("path"):
        return None  # trained on data that is not sim-recorded, or no dataset recorded at all
    info_file = Path(dataset["path"]) / INFO_PATH  # a bundle from before seeds were recorded in it
    if not info_file.is_file():
        return None
    try:
        block = sim_seeds(read_json(info_file, "dataset info"))
    except ActlabError:
        return None  # that dataset is not readable any more: nothing to check against
    return (block, where) if block else None


def record_dir(src: Any) -> Path | None:
    """Where an evaluation source's actlab training record is: its bundle, or the actlab bundle inside a
    LeRobot export run through the bridge (``--lerobot-policy EXPORT``: ``source_dir`` is the export).
    None for a factory or a plain object; a directory without a record (LeRobot's own policies) says
    nothing to the checks below. They skipped bridged exports: a so101_follower policy exported and
    evaluated with --lerobot-policy ran in the sim's degrees, at its training seeds, without a word."""
    found = source_dir(src)
    if found is None:
        return None
    inner = Path(found) / EXPORT_BUNDLE
    return inner if (inner / "actlab.json").is_file() else Path(found)


def trained_task(path: str | Path) -> tuple[str, str] | None:
    """(the sim task, the dataset path) a bundle was trained on, where its training data was recorded by
    ``actlab sim record`` and says so; None otherwise (another robot's data, an older bundle)."""
    found = _bundle_sim_seeds(Path(path))
    return (found[0]["task"], found[1]) if found is not None else None


def other_task_warnings(sources: Sequence[Any], task: str) -> list[str]:
    """One line per bundle trained on another sim task than the evaluation's ``task``: a policy trained on
    so101_push was evaluated on so101_pick_place without a word, its failures read as the policy's."""
    out = []
    for src in sources:
        path = record_dir(src)
        found = trained_task(path) if path is not None else None
        if found is not None and found[0] != task:
            out.append(
                f"{src.name} was trained on {found[0]} ({found[1]}) and is evaluated on {task}: its success "
                f"measures transfer to another task (--task {found[0]} evaluates the task it learned)"
            )
    return out


def check_trained_units(sources: Sequence[Any], units: str, option: str = "--units") -> None:
    """Refuse a bundle trained on recordings in other joint units than ``units``: a policy trained on
    so101_follower data (gripper 0-100) was evaluated in the sim's degrees without a word, and a degrees
    policy with ``--units so101_follower``; its actions are then read in the wrong units."""
    for src in sources:
        path = record_dir(src)
        found = _bundle_sim_seeds(path) if path is not None else None
        learned = found[0].get("units") if found is not None else None
        if learned is not None and learned != units:
            raise ActlabError(
                f"{src.name} was trained on joint units {learned} and would run in {units}: its actions "
                "would be read in the wrong units",
                file=path,
                field=option,
                expected=learned,
                found=units,
                fix=f"{option} {learned}" if option == "--units" else f"a base trained on {units} recordings",
            )


def _span(seeds: Sequence[int]) -> str:
    shown = ", ".join(str(s) for s in list(seeds)[:5])
    return f"{shown}{', ...' if len(seeds) > 5 else ''}"


def check_training_seeds(
    sources: Sequence[Any], task: str, seed: int, episodes: int, allow: bool
) -> dict[str, dict[str, Any]]:
    """Refuse (or with ``allow``, report) evaluation seeds that are scenes a source was trained on.

    ``sources``: the harness's PolicySources (bundles, and actlab exports run through the LeRobot bridge:
    a scripted expert or LeRobot's own policies do not say what they were trained on). Returns, by source
    name, the overlap of each source whose training scenes meet the evaluation's seeds ({"dataset",
    "seeds": the common seeds}); raises ActlabError for the first such source when ``allow`` is False.
    """
    wanted = set(range(seed, seed + episodes))
    overlaps: dict[str, dict[str, Any]] = {}
    for src in sources:
        path = record_dir(src)
        found = _bundle_sim_seeds(path) if path is not None else None
        if found is None or found[0]["task"] != task:  # another scene family: a seed is another scene
            continue
        dataset, recorded = found[1], found[0]["episode_seeds"]
        common = sorted(wanted.intersection(recorded))
        if not common:
            continue
        if not allow:
            raise ActlabError(
                "these evaluation episodes start from scenes the policy was trained on: their success "
                "says how well it replays its demonstrations, not how well it generalizes",
                file=path,
                field="--seed",
                expected=f"seeds outside the {len(recorded)} training scenes of {dataset} "
                f"(seeds {min(recorded)}..{max(recorded)})",
                found=f"seeds {seed}..{seed + episodes - 1}: {len(common)} of {episodes} are training "
                f"scenes ({_span(common)})",
                fix=f"leave --seed at its default ({DEFAULT_SEED}) or start above {max(recorded)}; to "
                "measure the training scenes on purpose, add --allow-training-seeds (the results say so)",
            )
        overlaps[src.name] = {"dataset": dataset, "seeds": common}
    return overlaps


__all__ = [
    "DEFAULT_SEED",
    "check_trained_units",
    "check_training_seeds",
    "other_task_warnings",
    "record_dir",
    "trained_task",
]
