"""Frozen-dataclass configs: JSON round trip, ``key=value`` overrides and did-you-mean for unknown names.

Configs are plain frozen dataclasses that validate themselves in ``__post_init__``. This module turns them
into JSON-ready dicts and back, applies command-line overrides such as ``policy.chunk_size=50`` with type
coercion from the field annotations, and names the closest valid key when a user mistypes one.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from actlab.errors import ActlabError

T = TypeVar("T")


def did_you_mean(name: str, choices: typing.Iterable[str]) -> str:
    """Return `` (did you mean 'x'?)`` for the closest choice, or an empty string."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_name_error(
    kind: str, name: str, choices: typing.Iterable[str], fix: str | None = None
) -> ActlabError:
    choices = sorted(choices)
    return ActlabError(
        f"unknown {kind} {name!r}{did_you_mean(name, choices)}",
        field=kind,
        expected="one of " + ", ".join(choices),
        found=name,
        fix=fix,
    )


def to_dict(cfg: Any) -> Any:
    """Dataclass (nested) -> JSON-ready dict; tuples become lists."""
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        return {f.name: to_dict(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}
    if isinstance(cfg, (list, tuple)):
        return [to_dict(v) for v in cfg]
    if isinstance(cfg, dict):
        return {k: to_dict(v) for k, v in cfg.items()}
    return cfg


def _resolved_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def is_whole(value: Any) -> bool:
    """``value`` is an integer as JSON holds one (a bool is no number, though Python counts it an int)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """``value`` is a number as JSON holds one, int or float (NaN is one: range checks refuse it)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Convert a JSON value (or a command-line string) to the annotated type ``tp``."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        if isinstance(value, str) and value.lower() in ("none", "null") and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, where)
            except (ValueError, TypeError, ActlabError):
                pass  # try the union's next member
        raise ValueError(f"{where}: cannot read {value!r} as {tp}")
    if origin is typing.Literal:
        for a in args:
            if value == a or (isinstance(value, str) and str(a) == value):
                return a
        raise ValueError(f"{where}: {value!r} is not one of {list(args)}")
    if dataclasses.is_dataclass(tp):
        if isinstance(tp, type) and isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected a mapping for {tp.__name__}, found {value!r}")
        return from_dict(tp, value, where=where)
    if origin in (tuple, list):
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                try:
                    value = json.loads(text)
                except json.JSONDecodeError:  # `[front]` was "Expecting value: line 1 column 2 (char 1)"
                    raise ValueError(
                        f"{where}: {text!r} is not a JSON list: write text in double quotes, "
                        '["a", "b"], or a comma list without brackets, a,b'
                    ) from None
            elif text == "":
                value = []
            else:
                value = [v.strip() for v in text.split(",")]
                if not all(value):  # `top,$CAM` with CAM unset: an empty name (23rd fault run)
                    raise ValueError(
                        f"{where}: an empty item in {text!r} (a stray comma, or an unset variable?)"
                    )
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"{where}: expected a list, found {value!r}")
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(v, args[0], where) for v in value)
        if origin is tuple and args:
            if len(args) != len(value):
                raise ValueError(f"{where}: expected {len(args)} items, found {len(value)}")
            return tuple(_coerce(v, a, where) for v, a in zip(value, args, strict=True))
        inner = args[0] if args else Any
        seq = [_coerce(v, inner, where) for v in value]
        return tuple(seq) if origin is tuple else seq
    if origin is dict:
        if isinstance(value, str):
            value = json.loads(value)
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected a mapping, found {value!r}")
        vt = args[1] if len(args) == 2 else Any
        return {k: _coerce(v, vt, where) for k, v in value.items()}
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on"):
            return True
        if isinstance(value, str) and value.lower() in ("false", "0", "no", "off"):
            return False
        raise ValueError(f"{where}: expected true/false, found {value!r}")
    if tp is int:
        if isinstance(value, bool):
            raise ValueError(f"{where}: expected an integer, found {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value.replace("_", ""))
            except ValueError:  # "NaN" was int()'s own message, without the key
                raise ValueError(f"{where}: expected an integer, found {value!r}") from None
        raise ValueError(f"{where}: expected an integer, found {value!r}")
    if tp is float:
        # null, a list, a dict or a word were float()'s TypeError traceback (--set sac.gamma=null), or its
        # ValueError without the key, which from_file then named as the field ("could not convert string")
        if is_number(value):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise ValueError(f"{where}: expected a number, found {value!r}")
    if tp is str:
        if not isinstance(value, str):
            raise ValueError(f"{where}: expected a string, found {value!r}")
        return value
    return value


def refused_value(
    e: ValueError,
    problem: str,
    file: str | Path | None = None,
    fix: str | None = None,
    field: str | None = None,
) -> ActlabError:
    """The ActlabError for a value :func:`from_dict` (or a config's own check) refused with a ValueError
    "KEY: what was wrong": the key as its field (``field`` where the message names none)."""
    key, _, rest = str(e).partition(": ")
    return ActlabError(problem, file=file, field=key if rest else field, found=rest or str(e), fix=fix)


def from_file(build: typing.Callable[[], T], file: str | Path, what: str, fix: str | None) -> T:
    """``build()`` (a config made from the contents of ``file``), a value it refuses named with the file:
    a run's config.json edited to ``optim.lr: -1`` was "invalid training config value for optim.lr" with
    no file and no fix (or the fix ``--set KEY=VALUE`` of a command that takes no --set), and
    ``batch_size: "NaN"`` int()'s traceback."""
    try:
        return build()
    except ValueError as e:
        raise refused_value(e, f"{what} holds a value actlab cannot use (edited?)", file=file, fix=fix) from e
    except ActlabError as e:
        if e.file is not None and str(e.file) != str(file):
            raise
        raise ActlabError(
            f"{what} holds a value actlab cannot use (edited?): {e.problem}",
            file=file,
            field=e.field,
            expected=e.expected,
            found=e.found,
            fix=fix or e.fix,
        ) from e


def from_dict(cls: type[T], data: dict, where: str = "") -> T:
    """Build dataclass ``cls`` from a dict, rejecting unknown keys with a did-you-mean."""
    hints = _resolved_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in data.items():
        if key not in names:
            raise unknown_name_error(
                "config key",
                f"{where}.{key}" if where else key,
                [f"{where}.{n}" if where else n for n in names],
            )
        kwargs[key] = _coerce(value, hints[key], f"{where}.{key}" if where else key)
    return cls(**kwargs)


def split_override(item: str) -> tuple[str, str | None]:
    """A ``key=value`` override as ``apply_overrides`` reads it: ``" a.b = 1"`` -> ``("a.b", "1")``; the
    value is None when there is no ``=`` (``apply_overrides`` refuses that one). Every reader of
    ``--set`` items goes through here, so a key is the same key everywhere."""
    key, sep, raw = item.partition("=")
    return key.strip(), (raw.strip() if sep else None)


def override_key(item: str) -> str:
    """The key of a ``key=value`` override (``split_override``)."""
    return split_override(item)[0]


# Where a config's keys are explained, for the fix of a refused --set key: a config class names the
# command that lists them (``KEYS_HELP``, a class attribute); one without it (the reward model's) has its
# keys in the error's expected line only. "run with --help-config" was said by every command, also by the
# six that have no --help-config (rl reward-model, policy info / bench, bench train, demo,
# find-batch-size), where the fix failed as printed (22nd fault run).
KEYS_HELP_ATTR = "KEYS_HELP"


def keys_help(cfg: Any) -> str:
    """Where the keys of ``cfg``'s config class are listed with their meaning (a fix's words)."""
    return getattr(type(cfg), KEYS_HELP_ATTR, None) or "the expected line above lists every key"


def check_override_key(item: str) -> None:
    """Refuse a ``--set`` key with an empty part (``optim..lr``, ``.lr``, ``optim.``, ``=1``): it was
    "unknown config key ''" (or 'optim.'), the user's item not shown, the stray dot not named (22nd
    fault run)."""
    key, _ = split_override(item)
    if any(not part for part in key.split(".")):
        raise ActlabError(
            "a --set key has an empty part (a stray or doubled dot, or no key before '=')",
            field="--set",
            expected="section.key=value with no empty part, e.g. optim.lr=0.001",
            found=item,
            fix="write the key with one dot between its parts and none at its ends (--set "
            + ".".join(p for p in key.split(".") if p)
            + "=VALUE)"
            if key.strip(".")
            else "write the key before '=', e.g. --set optim.lr=0.001",
        )


def apply_overrides(cfg: T, overrides: typing.Iterable[str]) -> T:
    """Return a copy of ``cfg`` with ``a.b=value`` overrides applied (values typed by the annotations).

    Every override of one section is applied before that section validates itself, so overrides that
    are only valid together (``chunk_size=50 n_action_steps=50``) work in any order. A later override of
    the same key wins. A refused key's fix says where the keys are listed (:func:`keys_help`).
    """
    tree: dict[str, Any] = {}
    for item in overrides:
        if "=" not in item:
            raise ActlabError(
                "an override must look like key=value",
                field="--set",
                expected="key=value, e.g. policy.chunk_size=50",
                found=item,
            )
        check_override_key(item)
        key, raw = split_override(item)
        node = tree
        parts = key.split(".")
        for i, part in enumerate(parts):
            inner = node.get(part)
            # a key and keys inside it, in either order: the later item replaced the earlier one's branch
            # (`optim.lr.x=2 optim.lr=0.5` dropped the first without a word; 22nd fault run)
            if (i < len(parts) - 1 and inner is not None and not isinstance(inner, dict)) or (
                i == len(parts) - 1 and isinstance(inner, dict)
            ):
                raise ActlabError(
                    "an override sets a key and also keys inside it",
                    field=key,
                    expected=f"either --set {'.'.join(parts[: i + 1])}=VALUE or keys inside it, not both",
                    found=item,
                    fix="drop one of the two --set items",
                )
            if i < len(parts) - 1:
                node = node.setdefault(part, {})
        node[parts[-1]] = (raw, key)
    return _apply_tree(cfg, tree, "", keys_help(cfg))


def _apply_tree(cfg: Any, tree: dict[str, Any], prefix: str, listed: str) -> Any:
    names = [f.name for f in dataclasses.fields(cfg)]
    hints = _resolved_hints(type(cfg))
    changes: dict[str, Any] = {}
    for name, sub in tree.items():
        full = prefix + name
        if name not in names:
            raise unknown_name_error(
                "config key",
                full,
                [prefix + n for n in names],
                fix=listed,
            )
        current = getattr(cfg, name)
        if isinstance(sub, dict):
            if not dataclasses.is_dataclass(current):
                inner = ", ".join(f"--set {leaf[1]}={leaf[0]}" for leaf in _leaves(sub))
                raise ActlabError(
                    f"{full} is a key, not a section: nothing goes inside it",
                    field=full,
                    expected=f"--set {full}=VALUE",
                    found=inner,
                    fix=f"set {full} itself (--set {full}=VALUE; {listed})",
                )
            changes[name] = _apply_tree(current, sub, full + ".", listed)
            continue
        raw, key = sub
        tp = hints[name]
        if dataclasses.is_dataclass(current):
            # `--set optim={"lr": 0.1}` built the whole section anew from the class's defaults: the preset's
            # other values of it (optim.backbone_lr 0.001 -> 1e-05) and earlier --set keys of it were
            # dropped without a word; `--set policy={...}` was "expected: a config dataclass, found: dict"
            # (21st fault run). A section is set one key at a time.
            inside = [f"{full}.{f.name}" for f in dataclasses.fields(current) if f.init]
            keys = ", ".join(inside[:8]) + (f" ... ({len(inside)} in all)" if len(inside) > 8 else "")
            one = inside[0] if inside else f"{full}.KEY"
            raise ActlabError(
                f"{full} is a section of the config, not a key: a value for it would replace all its keys "
                "with their defaults",
                field=key,
                expected=f"a key inside it: {keys}",
                found=f"--set {key}={raw}",
                fix=f"set its keys one at a time (--set {one}=VALUE ...; {listed}) (nothing was run)",
            )
        try:
            changes[name] = _coerce(parse_scalar(raw, tp), tp, key)
        except (ValueError, json.JSONDecodeError) as e:
            words = _type_words(tp)
            raise ActlabError(
                f"cannot read the value of --set {key}",
                field=key,
                expected=words,
                found=raw,
                fix=f"--set {key}=VALUE with VALUE {words} (read as written: {e})",
            ) from e
    try:
        return dataclasses.replace(cfg, **changes)
    except (ValueError, TypeError) as e:
        keys = ", ".join(prefix + k for k in changes)
        raise ActlabError(f"invalid value for {keys}: {e}", field=keys) from e


def _leaves(tree: dict[str, Any]) -> list[tuple[str, str]]:
    """The ``(raw, key)`` leaves of an override tree, as they were written."""
    out: list[tuple[str, str]] = []
    for sub in tree.values():
        out += _leaves(sub) if isinstance(sub, dict) else [sub]
    return out


def _type_words(tp: Any) -> str:
    """A field type in words ("<class 'int'>" was what an unreadable --set value was told to be)."""
    named = {int: "an integer, e.g. 100", float: "a number, e.g. 0.5", bool: "true or false", str: "text"}
    if tp in named:
        return named[tp]
    return "of type " + str(tp).replace("typing.", "")


def parse_scalar(raw: str, tp: Any) -> Any:
    """A command-line value for a field of type ``tp``: strings stay strings, the rest is read as JSON."""
    # Strings stay strings for str fields; everything else may be written as JSON (numbers, lists, null).
    if tp is str:
        return raw
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def flatten(cfg: Any, prefix: str = "") -> dict[str, Any]:
    """``{"policy.chunk_size": 100, ...}``: a nested dict, or a config (through :func:`to_dict`), keyed by
    dotted paths."""
    data = to_dict(cfg) if dataclasses.is_dataclass(cfg) else cfg
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def field_docs(cls: type) -> dict[str, str]:
    """Field comments (``# ...`` above a field or at its line's end) read from the source of ``cls`` and its
    bases (a subclass's comment wins)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is object:
            continue
        docs.update(_own_field_docs(klass))
    return docs


def _own_field_docs(cls: type) -> dict[str, str]:
    import inspect

    try:
        src = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    docs: dict[str, str] = {}
    pending: list[str] = []
    for line in src.splitlines():
        s = line.strip()
        if s.startswith("#"):
            pending.append(s.lstrip("# ").rstrip())
            continue
        if ":" in s and not s.startswith(("def ", "class ", "@", '"', "return")):
            name = s.split(":", 1)[0].strip()
            if name.isidentifier():
                tail = s.split("#", 1)[1].strip() if "#" in s else ""
                docs[name] = " ".join([*pending, tail]).strip()
        pending = []
    return docs


@dataclasses.dataclass(frozen=True)
class Inert:
    """A config key that has no effect under some setting of another key (``--set policy.kl_weight=50``
    with ``policy.use_vae=false``): a ``--set`` of it is refused rather than accepted without a word."""

    keys: tuple[str, ...]  # the keys without effect, as --set spells them
    inert: typing.Callable[[Any], bool]  # True when, under the resolved config, those keys do nothing
    # the setting that makes them inert, in words ("policy.use_vae=false"), or a function of the config
    state: str | typing.Callable[[Any], str]
    remedy: str  # the setting under which they take effect ("policy.use_vae=true")


def refuse_inert_overrides(cfg: Any, overrides: typing.Iterable[str], rules: typing.Iterable[Inert]) -> None:
    """Refuse a ``--set KEY=VALUE`` the resolved ``cfg`` ignores (a rule of ``rules`` holds for it), naming
    the setting that makes it inert and the one under which it would act. Only keys the user set are
    checked: a preset's own value of an inert key is not the user's doing."""
    given = {}
    for item in overrides:
        key, value = split_override(item)
        if value is not None:
            given[key] = value
    for rule in rules:
        for key in rule.keys:
            if key in given and rule.inert(cfg):
                state = rule.state(cfg) if callable(rule.state) else rule.state
                raise no_effect(
                    f"--set {key}", f"with {state}", rule.remedy, f"--set {key}={given[key]}", key
                )


def no_effect(label: str, because: str, remedy: str, found: str, field: str | None = None) -> ActlabError:
    """The refusal of a setting that another setting (or its absence) makes do nothing, in one wording
    for command-line flags (``cli._options.needs``) and ``--set`` keys (:func:`refuse_inert_overrides`):
    ``label`` as the user wrote it, ``because`` the reason ("without --whiskers", "with use_vae=false"),
    ``remedy`` the setting under which it acts."""
    return ActlabError(
        f"{label} has no effect {because}",
        field=field or label,
        expected=f"{label} together with {remedy}",
        found=found[:300],
        fix=f"add {remedy}, or leave {label} out (nothing was run)",
    )


def comma_items(text: str, field: str, example: str) -> list[str]:
    """The items of a comma list, stripped; an empty one is refused: `--execution sync,$MODE` with MODE
    unset (or a stray comma) ran sync alone, `--drop-episodes 3,` dropped episode 3 alone, without a word
    (23rd fault run; an empty value as a whole is refused where the command line is read)."""
    items = [x.strip() for x in text.split(",")]
    if not all(items):
        raise ActlabError(
            "a comma list has an empty item (a stray comma, or an unset shell variable?)",
            field=field,
            expected=f"a comma list without empty items, e.g. {example}",
            found=repr(text),
            fix=f"write every item, e.g. {field} {example} (nothing was run)",
        )
    refuse_repeated(items, items, field, text, example)
    return items


def refuse_repeated(values: list[Any], items: list[str], field: str, text: str, example: str) -> None:
    """Refuse a comma list whose ``values`` (its ``items`` as the command reads them: a latency in steps,
    an episode of a range) hold one twice. Every list option follows this one rule (25th fault run):
    `bench threads --threads 1,1` measured 1 twice and reported it once, `--execution sync,sync` and
    `--latency 3,100ms` (3 steps at 30 fps) were merged without a word, `--drop-episodes 0-3,2` dropped 2
    once, `--perturb noise=0,0.0` evaluated one level twice; `--cameras top,top` was refused already."""
    seen: dict[Any, str] = {}
    for value, item in zip(values, items, strict=False):
        if value in seen:
            same = item if seen[value] == item else f"{seen[value]} and {item} (both {value})"
            raise ActlabError(
                "a comma list names one item twice",
                field=field,
                expected=f"each item once, e.g. {example}",
                found=f"{same} in {text!r}",
                fix=f"write each item once: {field} {','.join(dict.fromkeys(items))} (nothing was run)"
                if seen[value] == item
                else f"keep one of {seen[value]} and {item} (nothing was run)",
            )
        seen[value] = item
