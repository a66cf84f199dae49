"""The LeRobot plugin is a distribution of its own that depends on actlab: no copy of actlab's
files in its wheel (two distributions owning the same files break each other on uninstall), and its actlab
requirement names this repository's version, so an export meets the actlab it was made with."""

from __future__ import annotations

from pathlib import Path

import pytest

import actlab

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11 (the suite's); 3.10 has no TOML reader

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "integrations" / "lerobot_policy_actlab" / "pyproject.toml"


def _toml(path: Path) -> dict:
    with path.open("rb") as f:
        return tomllib.load(f)


def test_the_plugin_requires_this_version_of_actlab_and_packages_only_its_adapters():
    plugin, root = _toml(PLUGIN), _toml(REPO / "pyproject.toml")
    version = root["project"]["version"]
    assert version == actlab.__version__
    assert f"actlab=={version}" in plugin["project"]["dependencies"]
    wheel = plugin["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert wheel["packages"] == ["lerobot_policy_actlab"] and "force-include" not in wheel
    assert plugin["project"]["version"] == version  # released together


def test_actlab_admits_lerobot_0_6_1s_av():
    # lerobot 0.6.1 pins av>=15,<16; actlab's floor must let both install into one environment (the
    # recorder then writes h264: actlab.datasets.video.auto_video_options)
    deps = _toml(REPO / "pyproject.toml")["project"]["dependencies"]
    assert "av>=15" in deps


def test_the_plugin_config_declares_the_execution_fields_actlab_names():
    """lerobot-rollout --policy.<field>=...: the flags the recommendation prints and the plugin reads
    (actlab.policies.execution.PLUGIN_FIELDS) are fields of the plugin's policy config (read without
    lerobot, from the source)."""
    import ast

    from actlab.policies.execution import PLUGIN_FIELDS

    tree = ast.parse((PLUGIN.parent / "lerobot_policy_actlab" / "configuration_actlab.py").read_text())
    shared = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "_ActlabConfig")
    fields = {s.target.id for s in shared.body if isinstance(s, ast.AnnAssign)}
    assert set(PLUGIN_FIELDS.values()) <= fields, fields
