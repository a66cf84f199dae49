"""Named presets of a config (openpi's ``get_config``): one table per command (``actlab train``,
``actlab rl train``), each entry a one-line description and a function building a complete, validated
config; an unknown name gets a did-you-mean. Imports nothing heavy (``--list-presets`` stays light)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from actlab.utils.config import field_docs, to_dict, unknown_name_error

C = TypeVar("C")


@dataclasses.dataclass(frozen=True)
class Preset(Generic[C]):
    """One named starting config."""

    description: str  # one line, shown by --list-presets
    build: Callable[[], C]  # a complete config (validated when built)


class PresetTable(Generic[C]):
    """The presets of one command, in the order they are listed."""

    def __init__(self, command: str, presets: dict[str, Preset[C]]) -> None:
        self.command = command  # e.g. "actlab rl train": named in the did-you-mean's fix
        self.presets = dict(presets)

    def names(self) -> list[str]:
        return list(self.presets)

    def describe(self) -> dict[str, str]:
        """Preset name -> its one-line description."""
        return {name: p.description for name, p in self.presets.items()}

    def get(self, name: str) -> C:
        """The named preset's config; an unknown name fails with a did-you-mean."""
        if name not in self.presets:
            raise unknown_name_error(
                "preset", name, self.presets, fix=f"{self.command} --list-presets shows them all"
            )
        return self.presets[name].build()

    def listing(self) -> str:
        """What ``--list-presets`` prints: one line per preset."""
        width = max(map(len, self.presets), default=0) + 2
        return "\n".join(f"{name:{width}s}{p.description}" for name, p in self.presets.items())


def describe_config(cfg: Any) -> list[tuple[str, Any, str]]:
    """``(key, value, comment)`` for every overridable key of a (sectioned) config dataclass, comments read
    from the dataclass sources: what ``--help-config`` prints."""
    out: list[tuple[str, Any, str]] = []

    def walk(obj: Any, prefix: str) -> None:
        docs = field_docs(type(obj))
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                walk(value, f"{prefix}{f.name}.")
            else:
                out.append((f"{prefix}{f.name}", to_dict(value), docs.get(f.name, "")))

    walk(cfg, "")
    return out


def iter_config_help(cfg: Any) -> Iterator[str]:
    """The lines of ``--help-config``: ``key = value`` and its comment indented below."""
    import json

    for key, value, doc in describe_config(cfg):
        yield f"{key} = {json.dumps(value, default=str)}"
        if doc:
            yield f"    {doc}"
