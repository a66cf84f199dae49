"""LeRobot datasets (and policies) by Hub repo id, from the local caches (nothing is downloaded).

lerobot 0.6.1 (``lerobot/utils/constants.py``, ``lerobot/datasets/dataset_metadata.py``) keeps datasets in
two places under ``HF_LEROBOT_HOME`` (``$HF_LEROBOT_HOME``, else ``$HF_HOME/lerobot``, ``HF_HOME`` being
``$HF_HOME`` or ``$XDG_CACHE_HOME/huggingface`` or ``~/.cache/huggingface``):

- ``HF_LEROBOT_HOME/<repo_id>``: datasets recorded or converted locally (``LeRobotDataset.create``), and
  what older versions downloaded there;
- ``HF_LEROBOT_HOME/hub/datasets--<owner>--<name>/snapshots/<commit>/``: Hub downloads since 0.6, a
  ``huggingface_hub`` snapshot cache (``refs/<revision>`` names the commit; files link to ``blobs/``).

:func:`find_hub_dataset` looks in both, in that order (LeRobot's own order: a local dataset wins), and
takes the snapshot of ``refs/v3.0`` (LeRobot's default revision), else ``refs/main``, else the newest.

Policies (``PreTrainedPolicy.from_pretrained(repo_id)``) are downloaded by huggingface_hub into its own
cache, ``$HF_HUB_CACHE`` or ``$HF_HOME/hub``: ``models--<owner>--<name>/snapshots/<commit>/`` with
``refs/main``; :func:`find_hub_model` finds a policy directory (``config.json``) there.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

# owner/name as the Hub spells repo ids (letters, digits, "-", "_", "."), nothing else: a path with more
# parts or a leading "./" or "/" is a path
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
# LeRobot's default dataset revision (CODEBASE_VERSION in lerobot 0.6.1), then the Hub's default branch
_REVISIONS = ("v3.0", "main")


def is_repo_id(text: str) -> bool:
    """True for ``owner/name`` (what the Hub calls a repo id)."""
    return bool(_REPO_ID.match(text))


def lerobot_home() -> Path:
    """LeRobot's ``HF_LEROBOT_HOME`` for this environment (see the module docstring)."""
    if os.environ.get("HF_LEROBOT_HOME"):
        return Path(os.environ["HF_LEROBOT_HOME"]).expanduser()
    return _hf_home() / "lerobot"


def hub_dataset_places(repo_id: str) -> list[Path]:
    """Where LeRobot keeps dataset ``repo_id``, in the order they are looked at."""
    home = lerobot_home()
    return [home / repo_id, home / "hub" / f"datasets--{repo_id.replace('/', '--')}"]


def _snapshot(repo_dir: Path) -> Path | None:
    """The snapshot directory of a huggingface_hub cache entry: refs/v3.0, refs/main, else the newest."""
    snapshots = repo_dir / "snapshots"
    for rev in _REVISIONS:
        ref = repo_dir / "refs" / rev
        if ref.is_file():
            commit = ref.read_text().strip()
            if (snapshots / commit).is_dir():
                return snapshots / commit
    found = [p for p in snapshots.iterdir() if p.is_dir()] if snapshots.is_dir() else []
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def find_hub_dataset(repo_id: str) -> Path | None:
    """The local directory of LeRobot dataset ``repo_id`` (one with ``meta/info.json``), or None."""
    local, hub = hub_dataset_places(repo_id)
    if (local / "meta" / "info.json").is_file():
        return local
    snap = _snapshot(hub) if hub.is_dir() else None
    if snap is not None and (snap / "meta" / "info.json").is_file():
        return snap
    return None


def dataset_location(path: str | Path) -> Path:
    """``path`` itself when it exists (or is not a repo id); else, for ``owner/name``, the dataset of that
    repo id in LeRobot's local cache when there is one; else ``path`` unchanged (its open then fails with
    the usual error, which :func:`not_found_hint` completes)."""
    p = Path(path)
    if p.exists() or not is_repo_id(str(path)):
        return p
    return find_hub_dataset(str(path)) or p


def not_found_hint(path: str | Path) -> str | None:
    """For a missing ``owner/name`` path: where LeRobot's cache was searched, and how to fill it."""
    if Path(path).exists() or not is_repo_id(str(path)):
        return None
    places = " and ".join(str(p) for p in hub_dataset_places(str(path)))
    return (
        f"nor is {path} a LeRobot dataset in the local Hub cache ({places}); download it with lerobot "
        '(`python -c "from lerobot.datasets.lerobot_dataset import LeRobotDataset; '
        f"LeRobotDataset('{path}')\"`) or pass the dataset's directory"
    )


def hub_cache() -> Path:
    """huggingface_hub's cache: ``$HF_HUB_CACHE``, else ``HF_HOME/hub`` (HF_HOME as in lerobot_home)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    return _hf_home() / "hub"


def _hf_home() -> Path:
    hf_home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface"
    )
    return Path(os.path.expandvars(os.path.expanduser(hf_home)))


def find_hub_model(repo_id: str) -> Path | None:
    """The snapshot directory of model ``repo_id`` in huggingface_hub's cache (one with ``config.json``,
    as LeRobot policies are saved), or None."""
    repo = hub_cache() / f"models--{repo_id.replace('/', '--')}"
    snap = _snapshot(repo) if repo.is_dir() else None
    return snap if snap is not None and (snap / "config.json").is_file() else None


def model_location(path: str | Path) -> Path:
    """``path`` itself when it exists (or is not a repo id); else the cached snapshot of model ``owner/name``
    when there is one; else ``path`` unchanged."""
    p = Path(path)
    if p.exists() or not is_repo_id(str(path)):
        return p
    return find_hub_model(str(path)) or p
