"""Rules between the options of one command, declared next to the options and checked by
:func:`actlab.cli.main` before the command runs, so a refusal costs nothing and writes nothing:

- :func:`paths`: the command's output paths must be distinct (``actlab monitor --out x --plot x`` wrote the
  CSV, then the plot over it), and none may be or lie inside one of its inputs (``data cache DS
  --cache-dir DS/meta`` decoded frames into the dataset). An ``--out`` that an output-marker command
  replaces is checked by ``actlab.utils.io.check_out_dir`` instead, which also refuses one that holds
  an input;
- every declared output is written to once, before the command runs (a read-only disk, no permission:
  ``monitor --plot`` on one ran the whole command and then failed);
- :func:`needs`: an option that only means something together with another is refused without it
  (``eval --whiskers-episode 3`` without ``--whiskers`` ran and never drew a whisker);
- :func:`file_outputs`: a single file an option names is never an existing file of a dataset, a run, a
  bundle or another command's output (``monitor --summary-json DS/meta/info.json`` replaced the dataset's
  info.json, ``data stats A --out B/meta/stats.json`` B's stats, ``sim view --out RUN/training.png`` the
  run's curves); a new file there, or any file elsewhere, is written as named;
- :func:`sets`: an option that sets a config key is refused together with ``--set`` of that key (one of
  the two was ignored without a word: ``train --dataset A --set data.path=B`` trained on B).

The rules are stored in the subcommand's defaults (``_paths``, ``_needs``, ``_sets``), so checking them
needs only the parsed arguments.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from actlab.errors import ActlabError
from actlab.utils.config import no_effect, override_key


def _action(p: argparse.ArgumentParser, name: str) -> argparse.Action:
    """The action of option ``name`` (``--out``) or positional ``name`` (its metavar or dest)."""
    for a in p._actions:
        if name in a.option_strings or (not a.option_strings and name in (a.metavar, a.dest)):
            return a
    raise KeyError(f"{p.prog} has no option {name}")  # a mistake in the declaration, found at build time


def _label(a: argparse.Action) -> str:
    return a.option_strings[-1] if a.option_strings else str(a.metavar or a.dest)


def _add(p: argparse.ArgumentParser, key: str, rule: tuple) -> None:
    p.set_defaults(**{key: [*(p.get_default(key) or []), rule]})


def paths(
    p: argparse.ArgumentParser, outputs: Sequence[str], inputs: Sequence[str] = (), probe: bool = True
) -> None:
    """Declare ``outputs`` (options naming a file or directory the command writes) and ``inputs``
    (options or positionals naming what it reads; a list-valued one counts each path). ``probe=False``
    for a command that writes its output first thing anyway (the trainers make their run directory
    before any work and say so in their own words)."""
    outs = [(_label(a), a.dest) for a in map(lambda n: _action(p, n), outputs)]
    ins = [(_label(a), a.dest) for a in map(lambda n: _action(p, n), inputs)]
    _add(p, "_paths", (tuple(outs), tuple(ins), probe))


def file_outputs(p: argparse.ArgumentParser, *options: str) -> None:
    """Declare ``options`` as naming one file the command writes (see the module docstring)."""
    for name in options:
        a = _action(p, name)
        _add(p, "_files", (_label(a), a.dest))


def refuse_replacing_anothers_file(label: str, raw: str) -> None:
    """The rule of :func:`file_outputs` for one path (also called by a command after its own, more
    specific checks: data stats refuses its own dataset first, naming --write-meta)."""
    # (imported here: --help stays light)
    from actlab.utils.kinds import enclosing_kind

    path = Path(os.path.expanduser(raw))
    if not (path.exists() or path.is_symlink()):
        return
    found = enclosing_kind(path.parent)
    if found is None:
        return
    where, kind = found
    raise ActlabError(
        f"{label} names a file of {kind}: writing it would replace that file",
        file=str(path),
        field=label,
        expected="a new file, or a file outside datasets, runs, bundles and other commands' outputs",
        found=f"{path} exists inside {where} ({kind})",
        fix=f"choose another {label} path (nothing was run or written)",
    )


def needs(
    p: argparse.ArgumentParser,
    option: str,
    on: str,
    when: Callable[[Any], bool] | None = None,
    what: str | None = None,
) -> None:
    """Declare that ``option`` has an effect only when ``on`` is given (or when ``when(args)`` holds;
    ``what`` then says the condition, e.g. "--videos above 0")."""
    a, b = _action(p, option), _action(p, on)
    _add(p, "_needs", (_label(a), a.dest, a.default, _label(b), b.dest, b.default, when, what))


def sets(p: argparse.ArgumentParser, option: str, key: str) -> None:
    """Declare that ``option`` sets the config key ``key`` (which ``--set key=...`` sets too)."""
    a = _action(p, option)
    _add(p, "_sets", (_label(a), a.dest, a.default, key))


def _given(value: Any, default: Any) -> bool:
    return value not in (None, False, [], ()) and value != default


def check(args: argparse.Namespace) -> None:
    """Refuse the parsed ``args`` when a declared rule of their command does not hold."""
    _say_a_key_set_twice(getattr(args, "overrides", None) or [])
    rules = getattr(args, "_needs", None) or []
    for label, dest, default, on_label, on_dest, on_default, when, what in rules:
        if not _given(getattr(args, dest, None), default):
            continue
        ok = when(args) if when is not None else _given(getattr(args, on_dest, None), on_default)
        if not ok:
            raise no_effect(
                label, f"without {what or on_label}", what or on_label, f"{label} {getattr(args, dest)!s}"
            )
    for label, dest, default, key in getattr(args, "_sets", None) or []:
        also = [o for o in getattr(args, "overrides", None) or [] if override_key(o) == key]
        if also and _given(getattr(args, dest, None), default):
            raise ActlabError(
                f"{label} and --set {key} both set {key}",
                field=f"{label}, --set {key}",
                expected=f"{key} given once",
                found=f"{label} {getattr(args, dest)!s}, --set {also[-1]}"[:300],
                fix=f"keep {label} or --set {key}, not both (nothing was run)",
            )
    for label, dest in getattr(args, "_files", None) or []:
        value = getattr(args, dest, None)
        if value not in (None, ""):
            refuse_replacing_anothers_file(label, str(value))
    for outs, ins, probe in getattr(args, "_paths", None) or []:
        _check_paths(args, outs, ins)
        if not probe:
            continue
        # (imported here: the rules above need nothing but argparse, and --help stays light)
        from actlab.utils.io import check_writable

        for _, dest in outs:
            for _, raw in _pairs(getattr(args, dest, None)):
                check_writable(raw)  # a read-only disk found before the work, not after it


def _say_a_key_set_twice(overrides: Sequence[str]) -> None:
    """``--set steps=2 --set steps=3``: the last value was used and the other dropped without a word. The
    last one still wins (a script's base options followed by an override is a way of working), and the
    dropped values are said (every command's --set, one rule). The same value twice says nothing."""
    values: dict[str, list[str]] = {}
    for item in overrides:
        if "=" in item:
            values.setdefault(override_key(item), []).append(item)
    for key, items in values.items():
        if len({i.split("=", 1)[1].strip() for i in items}) > 1:
            from actlab.utils.say import say  # (imported here: --help stays light)

            dropped = ", ".join(items[:-1])
            say(
                f"note: --set {key} is given {len(items)} times: the last, {items[-1]}, is used "
                f"({dropped} not)"
            )


def _check_paths(args: argparse.Namespace, outs: Sequence[tuple[str, str]], ins: Sequence[tuple[str, str]]):
    # (imported here: --help stays light; the rule itself is shared with the trainers' config paths)
    from actlab.utils.io import refuse_overlapping_paths

    refuse_overlapping_paths(
        [(label, raw) for label, dest in outs for _, raw in _pairs(getattr(args, dest, None))],
        [(label, raw) for label, dest in ins for _, raw in _pairs(getattr(args, dest, None))],
    )


def _pairs(value: Any) -> list[tuple[Path, str]]:
    if value is None:
        return []
    items = value if isinstance(value, list | tuple) else [value]
    # realpath, not Path.resolve: a symbolic link loop is the command's to report (resolve raises)
    return [(Path(os.path.realpath(os.path.expanduser(v))), str(v)) for v in items if v not in (None, "")]


def camera_list(text: str) -> tuple[str, ...]:
    """``--cameras top,wrist``: camera names, each once (``top,top`` made one camera without a word)."""
    names = tuple(c.strip() for c in text.split(","))
    if not any(names):
        raise argparse.ArgumentTypeError(
            f"expected comma-separated camera names, e.g. top,wrist, found {text!r}"
        )
    if not all(names):  # `top,$CAM` with CAM unset: top alone, no word
        raise argparse.ArgumentTypeError(
            f"an empty camera name in {text!r} (a stray comma, or an unset shell variable?)"
        )
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise argparse.ArgumentTypeError(
            f"camera {', '.join(twice)} is named twice in {text!r}: each camera needs its own name"
        )
    return names
