"""The ``actlab`` console script.

Each module in this package that defines ``register(subparsers)`` contributes subcommands. Those modules
hold argument parsing only; their handlers import the heavy code (torch, mujoco, av) when they run, so
``actlab --help`` stays fast and never imports torch.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import pkgutil
import sys
from pathlib import Path
from typing import Any

from actlab import __version__
from actlab.cli import _options
from actlab.errors import ActlabError, Terminated, from_environment
from actlab.utils.say import said_once

# Every example in every --help runs as written after `actlab demo --out runs/demo` (which leaves the
# recorded dataset in runs/demo/data, the training run in runs/demo/run with checkpoints/step_NNNNNNN/
# up to step_0005000 on CPU, and the decoded frames in runs/demo/cache), or uses only paths an example
# before it in the same block creates: tests/cli/test_help_examples.py runs them all.
_EPILOG = """\
examples:
  actlab demo --out runs/demo                  # record, train, evaluate, report (CPU: ~10 min, ~2 GB)
  actlab data info runs/demo/data              # the dataset the demo recorded
  actlab eval runs/demo/run/checkpoints/step_0002000 --episodes 20 --videos 2 --out runs/eval2000
  actlab train --preset so101_sim_cpu --dataset runs/demo/data --out runs/cpu \\
      --set data.cache_dir=runs/demo/cache --set steps=1000     # a shorter run on the demo's frames
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
    _guard_numbers(parser)
    return parser


def _guard_numbers(parser: argparse.ArgumentParser) -> None:
    """Every int or float option of every command refuses NaN, infinite, negative and oversized values at
    parse time (argparse's usage error, exit 2, naming the option), before any work: they are counts,
    sizes, seeds, durations and scales, and a negative one failed deep inside a command (a negative
    --seed reached numpy's SeedSequence as a traceback), a huge one asked a 2-core machine for memory or
    years (``--episodes 1000000000000``). The ceiling is :data:`_CEILINGS`'s for the option's name, else
    :data:`_CEILING`. An option whose own default is negative (a "-1 = automatic" sentinel) accepts its
    sentinel and keeps the rest of the checks. Done here, over the parser, so options added later are
    covered without anyone remembering to."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sp in action.choices.values():
                _guard_numbers(sp)
        elif action.type in (int, float):
            floor = _FLOORS_OF.get(
                (parser.prog.partition(" ")[2], action.dest),
                _FLOORS.get(action.dest, min(_negatives(action.default), default=0)),
            )
            ceiling = _CEILINGS.get(action.dest, _CEILING)
            action.type = bounded(action.type, floor, ceiling, _CEILING_WHY.get(action.dest, _MACHINE))
        elif action.dest.endswith("_python") and action.type in (None, str):
            action.type = non_empty(_python_program)  # a directory failed as "permission denied"
        elif _takes_text(action):
            action.type = non_empty(action.type)
    nested = getattr(parser, "compare_parser", None)  # `actlab eval compare`'s own parser
    if nested is not None:
        _guard_numbers(nested)


# Text options where an empty string is a value of its own (an empty instruction is sent as given).
_EMPTY_ALLOWED = frozenset({"instruction"})


def _takes_text(action: argparse.Action) -> bool:
    """An option or positional whose values are strings (paths, names, lists): an empty one is refused.
    Why: ``--out ""``, ``--cache-dir ""`` or ``--init-from ""`` (an unset shell variable) meant the current
    directory or nothing at all: ``data cache DS --cache-dir ""`` wrote its store into the current
    directory and ``train --init-from ""`` trained from scratch, exit 0; ``--out ""`` was refused as "output
    directory already exists"."""
    return (
        action.type in (None, str)
        and action.nargs not in (0, argparse.REMAINDER, argparse.SUPPRESS)
        and not isinstance(action, argparse._SubParsersAction)
        and action.dest not in _EMPTY_ALLOWED
        and action.dest != "help"
        and action.default != ""
    )


def non_empty(kind: Any) -> object:
    def parse(text: str) -> Any:
        if text == "":
            raise argparse.ArgumentTypeError(
                "expected a value, found '' (an empty string: an unset shell variable? An empty path is "
                "not the current directory here: write . for it)"
            )
        return text if kind in (None, str) else kind(text)

    parse.__name__ = getattr(kind, "__name__", "str") if kind is not None else "str"
    return parse


# The smallest value of a numeric option whose 0 means nothing, by its dest (others: 0). `--horizon -3`
# was refused as "expected a number >= 0", then `--horizon 0` as "an integer >= 1".
# Floors of one command's option where the same name means another thing elsewhere (sim record --workers 0
# runs in this process): eval --workers 0 was refused after parsing as "workers must be an integer >= 1",
# field workers (a config field, no option named, no fix).
_FLOORS_OF: dict[tuple[str, str], float] = {
    ("eval", "workers"): 1,
    # eval --batch-envs 0: "batch_envs must be an integer >= 1", field batch_envs (no option, no fix; 23rd
    # fault run); bench eval's 0 is its serial configuration, said in a note
    ("eval", "batch_envs"): 1,
    # the sim renders 16 to 1024 px: sim view / sim bench --image-size 0 said "image_size out of range",
    # eval's "image size too small, expected >= 8" (config fields, no option, no fix)
    ("sim view", "image_size"): 16,
    ("sim bench", "image_size"): 16,
    ("eval", "image_size"): 16,
}

_FLOORS: dict[str, float] = {
    "horizon": 1,
    "whiskers_every": 1,
    # counts and sizes of every command that has them (policy bench, bench threads, policy info, find-batch-
    # size, bench train, data synth, policy doctor): 0 was a torch reshape or "no median for empty data"
    # traceback (policy bench --batch-size 0 / --steps 0, bench threads --rounds 0 / --batch-size 0), and
    # policy info --state-dim 0 printed a count for a policy without a state after a torch warning
    "batch_size": 1,
    "steps": 1,
    "rounds": 1,
    "state_dim": 1,
    "action_dim": 1,
    # eval --threads 0 was "threads must be >= 1, field: threads_per_worker" (no such option), data stats
    # --relative-horizon 0 "relative_action_horizon must be >= 1"
    "threads": 1,
    "relative_horizon": 1,
    # bench data --action-horizon 0 / bench eval --episodes 0 / --max-steps 0 were refused after parsing
    # as "batch size and action horizon must be >= 1", found (2, 0) (two options in one, no fix) or under
    # a config field's name (episodes, max_steps): every command's counts of episodes and steps, here
    "action_horizon": 1,
    "episodes": 1,
    "max_steps": 1,
    # bench data --seconds 0 was "--workers must be >= 0 and --seconds/--baseline-seconds > 0", found
    # (2, 0.0, 1.0): a time to measure for is above 0 (a hundredth of a second at least)
    "seconds": 0.01,
    "baseline_seconds": 0.01,
}

# The largest value of a numeric option, by its dest: what one machine of ours (2 cores, a few GB free)
# can hold or finish. A value above it is refused at parse time with the ceiling named.
_CEILING = 10**9
_CEILINGS: dict[str, float] = {
    # px per side: one 4096 x 4096 RGB frame is 48 MiB, a batch of them more than the machine has
    "image_size": 4096,
    # episodes of a recording or an evaluation: 100000 sim episodes are days of CPU already
    "episodes": 100_000,
    "eval_episodes": 100_000,
    "max_episodes": 100_000,
    "episodes_per_dataset": 100_000,
    "videos": 100_000,
    "whiskers_episode": 100_000,
    "episode": 10**7,
    # frames of a synthetic dataset or a rendering (10 M frames of 224 px video are ~100 GB)
    "frames": 10**7,
    # processes and threads: each worker holds MuJoCo, torch and its frames (~0.3-1 GB)
    "workers": 64,
    "lerobot_workers": 64,
    "burners": 64,
    "threads": 256,
    "batch_envs": 1024,
    "cameras": 16,
    "batch_size": 65536,
    "start": 65536,
    "max": 65536,
    "multiple_of": 65536,
    "state_dim": 4096,
    "action_dim": 4096,
    # a seed is a 32-bit unsigned integer for numpy's and MuJoCo's generators
    "seed": 2**32 - 1,
    "fps": 1000,
    "seconds": 86400.0,
    "baseline_seconds": 86400.0,
    "hang_seconds": 86400.0,
    "peak_tflops": 1e6,
    # fractions
    "margin": 1.0,
    "tolerance": 1.0,
    # action noise, in units of the action's scale
    "noise": 1e3,
    "horizon": 100_000,
    "action_horizon": 100_000,
    "relative_horizon": 100_000,
    "state_delta": 100_000,
    "max_steps": 10**7,
    "steps": 10**7,
    "lerobot_steps": 10**7,
    "rounds": 10**6,
    "encodes": 10**6,
    "stride": 10**6,
    "whiskers_every": 10**6,
    "image_samples": 10**6,
    "overfit": 10**6,
}


# Why a value above the ceiling is refused: most ceilings are what one machine can hold or finish; a seed's
# and a fraction's are not ("--seed 4294967296: more than one machine can hold or finish" named the wrong
# cause)
_MACHINE = "more than one machine can hold or finish"
_CEILING_WHY: dict[str, str] = {
    "seed": "seeds of numpy's and MuJoCo's generators are 32-bit unsigned integers",
    "margin": "a fraction of the memory limit",
    "tolerance": "a fraction of the best fit",
}


def _expand_home(args: argparse.Namespace) -> None:
    """A leading ``~`` of an option's value is the home directory, as the shell would make it where it
    does not (``--out=~/x``, a quoted path): before, the overlap checks expanded it and the writers did
    not, so ``--out '~/x'`` made a directory named ``~`` in the working directory and then failed."""

    def expand(value: object) -> object:
        if isinstance(value, str) and (value == "~" or value.startswith("~" + os.sep)):
            return os.path.expanduser(value)
        if isinstance(value, list):
            return [expand(v) for v in value]
        return value

    for name, value in vars(args).items():
        if not name.startswith("_") and name != "cmd":  # the monitored command gets its words as given
            setattr(args, name, expand(value))


def _python_program(text: str) -> str:
    """An interpreter to run, refused at parse time when the path names a directory or a file that is
    not executable (a directory was reported as "permission denied" by the child's exec). A path that
    does not exist yet passes the parser (examples are parsed where no such venv is) and is reported as
    "not found" when the command runs it."""
    path = os.path.expanduser(text)
    if os.path.isdir(path) or (os.path.isfile(path) and not os.access(path, os.X_OK)):
        what = "a directory" if os.path.isdir(path) else "not executable"
        raise argparse.ArgumentTypeError(
            f"{text!r} is {what}: expected a Python interpreter, e.g. /path/to/venv/bin/python"
        )
    return text


def _negatives(default: object) -> list[float]:
    values = default if isinstance(default, (list, tuple)) else [default]
    return [v for v in values if isinstance(v, (int, float)) and v < 0]


def option_ceiling(dest: str) -> tuple[float, str]:
    """The parse-time ceiling of the options named ``dest`` and why, for a command that reads numbers out of
    a comma list the parser sees as text (``bench threads --threads 1,999`` escaped it)."""
    return _CEILINGS.get(dest, _CEILING), _CEILING_WHY.get(dest, _MACHINE)


def bounded(kind: type, floor: float, ceiling: float, why: str = _MACHINE) -> object:
    def parse(text: str) -> int | float:
        value = kind(text)  # ValueError: argparse says "invalid int value"
        if value != value or value in (float("inf"), float("-inf")):
            raise argparse.ArgumentTypeError(f"expected a finite number, found {text!r}")
        if value < floor:
            allowed = f"a number >= 0 (or {floor:g}, automatic)" if floor < 0 else f"a number >= {floor:g}"
            raise argparse.ArgumentTypeError(f"expected {allowed}, found {text}")
        if value > ceiling:
            shown = int(ceiling) if kind is int else f"{ceiling:g}"  # (4294967295, not 4.29497e+09)
            raise argparse.ArgumentTypeError(f"expected a number <= {shown} ({why}), found {text}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in "invalid int value: 'x'"
    return parse


def main(argv: list[str] | None = None) -> int:
    """Run one ``actlab`` command; the exit status: 0 done, 2 refused (an ActlabError, printed without a
    traceback), 130 interrupted, 141 stdout closed by the reader, or what the command returns.

    Failures of the environment (a file that cannot be read or written, text that is not UTF-8) are
    printed in the ActlabError format too (:func:`actlab.errors.from_environment`), naming the file and
    the fix, so no command ends in a traceback for them; ``ACTLAB_TRACEBACK=1`` shows the traceback.
    """
    _closed_streams_to_devnull()
    from actlab.utils.procs import exit_on_sigterm

    # SIGTERM raises Terminated in every command from here on, the parser's imports included (every
    # `finally` runs: worker pools stopped, temporary outputs removed), said below; a command with a
    # handler of its own (train and rl train checkpoint, monitor forwards it) installs it inside and keeps
    # it. A command without one exited 143 without a word (rl reward-model while it rolled out, any
    # command in its first seconds).
    with exit_on_sigterm(), _plain_warnings():
        return _main(argv)


@contextlib.contextmanager
def _plain_warnings():
    """actlab's own warnings said as one line, "warning: MESSAGE", as the rest of its notes: they were
    Python's "/path/to/actlab/evaluation/harness.py:177: UserWarning: MESSAGE" followed by a line of the
    source. Other packages' warnings keep Python's format; a caller that records warnings (pytest,
    ``warnings.catch_warnings(record=True)``) keeps recording them."""
    import warnings

    old = warnings.showwarning
    if getattr(getattr(warnings, "_showwarnmsg_impl", None), "__name__", "") != "_showwarnmsg_impl":
        yield  # warnings are being recorded, not shown
        return

    from actlab.errors import plain_warnings

    show = plain_warnings(old)
    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = old


def _main(argv: list[str] | None) -> int:
    try:
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)  # inside: --help and --help-config print to a pipe too
        if extra:
            # `eval RUN_A --episodes 5 RUN_B`: argparse reads one run of PATHs, and said "unrecognized
            # arguments: RUN_B" of a path the command takes (23rd fault run)
            loose = [a for a in extra if not a.startswith("-")]
            hint = ""
            if loose and isinstance(getattr(args, "paths", None), list):
                hint = f" ({' '.join(loose)}: every PATH goes together, before the options or after them all)"
            parser.error(f"unrecognized arguments: {' '.join(extra)}{hint}")
        run = getattr(args, "_run", None)
        if run is None:
            # A group such as `actlab data` without its subcommand: show that group's help.
            helper = getattr(args, "_help", parser.print_help)
            helper()
            code = 0 if args.command is None else 2
        else:
            _expand_home(args)
            _options.check(args)  # options that contradict each other: refused before any work
            with said_once():  # a note that several evaluations of one command find is said once
                code = int(run(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler, not at interpreter exit
        return code
    except BrokenPipeError as e:
        if _stdout_broken():
            return _stdout_closed()
        return _refused(from_environment(e))  # a pipe to a child process (e.g. the LeRobot bridge)
    except Terminated as e:  # (a SystemExit: caught before the one of argparse below)
        with contextlib.suppress(BrokenPipeError, ValueError):
            print(terminated_line(e), file=sys.stderr)
        return int(e.code)
    except SystemExit:  # argparse after --help or a usage error: its output may not have reached a pipe
        try:
            sys.stdout.flush()
        except BrokenPipeError:  # (argparse itself ignores a failed write, the final flush would not)
            return _stdout_closed()
        raise
    except ActlabError as e:
        return _refused(e)
    except KeyboardInterrupt as e:
        # (a command that stopped cleanly on Ctrl-C says how to go on in the exception's text)
        print(f"interrupted: {e}" if str(e) else "interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        err = from_environment(e)
        if err is None or os.environ.get("ACTLAB_TRACEBACK"):
            raise  # a bug: its traceback is what a report needs
        return _refused(err)


def terminated_line(e: Terminated) -> str:
    """What a command a SIGTERM stopped says: its workers and temporary output are gone, and what it
    wrote or did not (``e.note``, set by a command that knows, e.g. rl reward-model's "nothing written")."""
    line = "terminated (SIGTERM): worker processes stopped, partial output removed"
    return f"{line}; {e.note}" if e.note else line


def _closed_streams_to_devnull() -> None:
    """A process started with file descriptor 1 or 2 closed (`actlab train ... >&-`) has sys.stdout or
    sys.stderr None, and every print to it (and tqdm's bar) would be an AttributeError: what it prints
    is discarded instead, as if it went to /dev/null, and the command runs to its end."""
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w"))  # noqa: SIM115 (open for the process's life)


# The status of a command whose reader closed stdout (`actlab data info --json | head -1`): 141 = 128 +
# SIGPIPE, what the shell reports for a C program killed by the same broken pipe (`yes | head` under
# `set -o pipefail`), so scripts see "the reader stopped", not success and not a failure of ours.
EXIT_STDOUT_CLOSED = 141


def _stdout_broken() -> bool:
    """Whether stdout is a pipe whose reader went away (poll reports POLLERR on its write end), so that
    a BrokenPipeError from a pipe to a child process is not taken for it. A stdout without a descriptor
    (replaced in tests) counts as the one that broke."""
    import select

    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
    except (OSError, ValueError, AttributeError):
        return True
    poller.register(fd, select.POLLOUT)
    return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))


def _stdout_closed() -> int:
    """The reader of stdout went away: stop quietly, as well-behaved CLIs do. Python ignores SIGPIPE and
    raises BrokenPipeError instead; stdout is pointed at /dev/null so the interpreter's final flush of
    the buffered rest cannot raise a second time ("Exception ignored ... BrokenPipeError")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout without a file descriptor (captured in tests)
        pass
    return EXIT_STDOUT_CLOSED


def _refused(e: ActlabError) -> int:
    e = _while_training(e)
    with contextlib.suppress(BrokenPipeError, ValueError):  # stderr closed too: the status alone tells
        print(f"error: {e.render()}", file=sys.stderr)
    return 2


def _while_training(e: ActlabError) -> ActlabError:
    """``e`` about a file of a checkpoint that vanished while the command read it, because a trainer that
    holds the run's lock now pruned it: said as such. `actlab eval RUN` beside `actlab train --out RUN`
    said "config.json missing, check the path" of the checkpoint it had just chosen."""
    if not e.file:
        return e
    for step_dir in (Path(e.file), *Path(e.file).parents):
        if step_dir.parent.name == "checkpoints" and step_dir.name.startswith("step_"):
            break
    else:
        return e
    run = step_dir.parent.parent
    if step_dir.exists():
        return e
    # (imported here: only a refusal about a vanished checkpoint gets this far)
    from actlab.utils.lock import holder

    pid = holder(run)
    if pid is None:
        return e
    return ActlabError(
        f"checkpoint {step_dir.name} is not there (any more): the run is being trained now (pid {pid}), "
        "which keeps only its newest checkpoints and removes older ones as it goes",
        file=step_dir,
        found=e.problem,
        fix=f"evaluate a copy (`cp -r {run}/checkpoints/step_N COPY` of a checkpoint it keeps), or wait for "
        f"pid {pid} to finish",
    )


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


def add_preset_flags(p: argparse.ArgumentParser, set_example: str) -> None:
    """The config flags ``actlab train`` and ``actlab rl train`` share: ``--preset``, ``--set``,
    ``--list-presets``, ``--print-config`` and ``--help-config`` (read by :func:`resolve_preset_config`
    and :func:`answer_config_flags`)."""
    p.add_argument("--preset", metavar="NAME", help="starting config (see --list-presets)")
    add_set_flag(p, f"override a config key, e.g. --set {set_example} (repeatable)")
    p.add_argument("--list-presets", action="store_true", help="list the presets and exit")
    p.add_argument("--print-config", action="store_true", help="print the resolved config as JSON and exit")
    p.add_argument("--help-config", action="store_true", help="list every config key with its meaning")


def resolve_preset_config(args: argparse.Namespace, presets, load_saved, help_preset: str):
    """The starting config: ``--preset NAME``; else, with ``--resume --out DIR``, the config the run in
    DIR was started with (``load_saved(DIR)``); else, for ``--help-config`` alone, the preset
    ``help_preset``. Overrides are the caller's (each trainer applies its own)."""
    if args.preset:
        return presets.get(args.preset)
    if getattr(args, "resume", False) and args.out:
        return load_saved(args.out)
    if args.help_config:
        return presets.get(help_preset)
    raise ActlabError(
        "no config given",
        field="--preset",
        expected="--preset NAME, or --resume with an existing --out",
        fix=f"{presets.command} --list-presets shows the presets",
    )


def answer_config_flags(args: argparse.Namespace, presets, resolve, as_dict) -> object | None:
    """Answer ``--list-presets`` / ``--help-config`` / ``--print-config`` (printing, returning None), or
    return the config ``resolve()`` builds for the command to run."""
    import json

    if args.list_presets:
        print(presets.listing())
        return None
    cfg = resolve()
    if args.help_config:
        from actlab.utils.presets import iter_config_help  # lazy: only --help-config reads the sources

        print("\n".join(iter_config_help(cfg)))
        return None
    if args.print_config:
        print(json.dumps(as_dict(cfg), indent=2))
        return None
    return cfg


def add_json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print machine-readable JSON instead of a table")


def add_codec_flag(p: argparse.ArgumentParser) -> None:
    """--codec of a command that writes video (actlab.datasets.video.CODEC_CHOICES: not imported here,
    the video module imports PyAV; a test checks they agree)."""
    p.add_argument(
        "--codec",
        default="auto",
        choices=("auto", "av1", "h264"),
        help="video codec: auto = AV1 (LeRobot's default), h264 on a busy CPU (where SVT-AV1 stalled) or "
        "with PyAV < 17; av1 or h264 to choose (auto)",
    )


# --lerobot-timeout's default and limit (seconds); actlab.lerobot.bridge's REPLY_TIMEOUT_S and
# MAX_REPLY_TIMEOUT_S (not imported here: the bridge imports numpy and torch; a test checks they agree).
LEROBOT_TIMEOUT_S = 600.0
LEROBOT_TIMEOUT_MAX_S = 86400.0


def _lerobot_timeout(text: str) -> float:
    """Seconds in (0, LEROBOT_TIMEOUT_MAX_S]: 0 would kill every child at once, NaN never."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected seconds, e.g. {LEROBOT_TIMEOUT_S:g}, found {text!r}"
        ) from None
    if not 0 < value <= LEROBOT_TIMEOUT_MAX_S:
        raise argparse.ArgumentTypeError(
            f"expected seconds > 0 and <= {LEROBOT_TIMEOUT_MAX_S:g} (a day), found {text!r}"
        )
    return value


def add_lerobot_timeout(g: argparse._ArgumentGroup) -> None:
    """``--lerobot-timeout S`` (``args.lerobot_timeout``), shared by every command that runs the LeRobot
    bridge (eval, policy doctor): validated here, at parse time."""
    g.add_argument(
        "--lerobot-timeout",
        type=_lerobot_timeout,
        default=LEROBOT_TIMEOUT_S,
        metavar="S",
        help=f"longest wait in seconds for one answer of the lerobot child, loading included "
        f"({LEROBOT_TIMEOUT_S:g}); past it the child and every process it started are killed and the "
        "command fails",
    )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
