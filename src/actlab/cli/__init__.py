"""The ``actlab`` console script.

Each module in this package that defines ``register(subparsers)`` contributes subcommands. Those modules
hold argument parsing only; their handlers import the heavy code (torch, mujoco, av) when they run, so
``actlab --help`` stays fast and never imports torch.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from actlab import __version__
from actlab.errors import ActlabError, Terminated

# Every example in every --help runs as written after `actlab demo --out runs/demo` (which leaves the
# recorded dataset in runs/demo/data, the training run in runs/demo/run with checkpoints/step_NNNNNNN/
# up to step_0005000 on CPU, and the decoded frames in runs/demo/cache), or uses only paths an example
# before it in the same block creates: tests/cli/test_help_examples.py runs them all.
_EPILOG = """\
examples:
  actlab demo --out runs/demo                  # record, train, evaluate, report (CPU: ~10 min, ~2 GB)
  actlab data info runs/demo/data              # the dataset the demo recorded
  actlab eval runs/demo/run/checkpoints/step_0005000 --episodes 20 --videos 2 --out runs/eval5000
  actlab train --preset so101_sim_cpu --dataset runs/demo/data --out runs/cpu \\
      --set data.cache_dir=runs/demo/cache --set steps=2000     # a shorter run on the demo's frames
  actlab eval --help                           # every command's help ends with its own examples
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="actlab",
        description="Train, profile and evaluate action-chunking robot policies (ACT, ACT-relative/RTC).",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"actlab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(mod, "register"):
            modules.append(mod)
    for mod in sorted(modules, key=lambda m: getattr(m, "ORDER", 100)):
        mod.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    run = getattr(args, "_run", None)
    if run is None:
        # A group such as `actlab data` without its subcommand: show that group's help.
        helper = getattr(args, "_help", parser.print_help)
        helper()
        return 0 if args.command is None else 2
    try:
        code = run(args)
    except ActlabError as e:
        print(f"error: {e.render()}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Terminated as e:
        print("terminated (SIGTERM): worker processes stopped, partial output removed", file=sys.stderr)
        return int(e.code)
    return int(code or 0)


def group(sub, name: str, help: str, epilog: str | None = None) -> argparse._SubParsersAction:
    """Add a command group (``actlab data ...``) whose bare form prints its help, which ends with the
    group's examples (kept as written; tests/cli/test_help_examples.py requires them)."""
    p = sub.add_parser(
        name, help=help, description=help, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.set_defaults(_help=p.print_help)
    return p.add_subparsers(dest=f"{name}_command", metavar="SUBCOMMAND")


def subcommand(
    g: argparse._SubParsersAction, name: str, help: str, epilog: str, description: str | None = None
) -> argparse.ArgumentParser:
    """A subcommand of a group whose ``--help`` ends with its examples (kept as written); the description
    defaults to the one-line help."""
    return g.add_parser(
        name,
        help=help,
        description=description or help,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_set_flag(p: argparse.ArgumentParser, help: str) -> None:
    """The repeatable ``--set KEY=VALUE`` config override, collected in ``args.overrides``."""
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=help)


def add_json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
