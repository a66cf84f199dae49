"""The demo report's last section: what to do next with the policy, as commands that run as written."""

from __future__ import annotations

import ast
import shlex
from pathlib import Path

import pytest

from actlab.cli import build_parser
from actlab.cli.demo import demo_config
from actlab.demo.pipeline import DemoConfig, command_line, demo_argv, next_steps, resolve
from actlab.training.config import resume_diff

REPO = Path(__file__).resolve().parents[2]
SIM_ROBOT_CONFIG = (
    REPO / "integrations/lerobot_policy_actlab/lerobot_policy_actlab/config_actlab_so101_sim.py"
)


def _robot_fields() -> set[str]:
    """Field names of the sim robot's LeRobot config, read from its source (lerobot is not installed here)."""
    tree = ast.parse(SIM_ROBOT_CONFIG.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ActlabSO101SimConfig")
    return {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign)}


@pytest.mark.timeout(120)
def test_every_next_step_is_a_command_that_parses_and_means_what_it_says(tmp_path):
    out = tmp_path / "my demo"  # a space: the lines must be quoted for a shell
    cfg = DemoConfig(
        out=str(out), device="cpu", episodes=4, eval_episodes=2, videos=1, workers=1,
        overrides=("checkpoint.every=10", "steps=20"),
    )  # fmt: skip
    plan = resolve(cfg)
    best = "/elsewhere/run/checkpoints/step_0000020"  # recorded before the directory moved
    steps = next_steps(cfg, plan, best)
    assert len(steps) == 6 and all(why and argv for why, argv in steps)
    parser = build_parser()
    here_best = str(out / "run" / "checkpoints" / "step_0000020")
    by_program: dict[str, list] = {}
    for _why, argv in steps:
        assert shlex.split(command_line(argv)) == argv  # the printed line is the same command
        by_program.setdefault(" ".join(argv[:2]), []).append(argv)
        if argv[0] == "actlab":
            parser.parse_args(argv[1:])  # argparse exits (SystemExit) on any unknown flag or bad value

    (ev,) = by_program["actlab eval"]
    args = parser.parse_args(ev[1:])
    assert args.paths == [here_best] and args.episodes == 200 and args.seed >= 200_000 + cfg.eval_episodes
    (doc,) = by_program["actlab policy"][:1]
    args = parser.parse_args(doc[1:])
    assert args.bundle == here_best and args.dataset == str(out / "data")
    export = by_program["actlab policy"][1]
    args = parser.parse_args(export[1:])
    assert (args.bundle, args.to, args.out) == (here_best, "lerobot", str(out / "lerobot"))

    # The demo lines: the same settings (every stage reused), then twice the steps (a resumable change),
    # then --realtime.
    longer, realtime = by_program["actlab demo"]
    same = demo_config(parser.parse_args(demo_argv(cfg, plan)[1:]))
    assert resolve(same)["train"] == plan["train"] and same.episodes == 4 and same.workers == 1
    twice = resolve(demo_config(parser.parse_args(longer[1:])))["train"]
    assert twice.steps == 40 and resume_diff(plan["train"], twice) == {}
    assert parser.parse_args(realtime[1:]).realtime

    # lerobot-rollout's flags: the sim robot's own fields, pointing at the export and under the demo dir.
    (rollout,) = by_program["lerobot-rollout --strategy.type=base"]
    fields = _robot_fields()
    for flag in rollout[1:]:
        key, _, _value = flag.removeprefix("--").partition("=")
        if key.startswith("robot."):
            assert key.removeprefix("robot.") in fields | {"type"}, flag
    assert (
        f"--policy.path={out / 'lerobot'}" in rollout and f"--robot.output_dir={out / 'rollout'}" in rollout
    )
