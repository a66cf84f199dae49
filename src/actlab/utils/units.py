"""Byte sizes in words and back: the one parser and the one formatter of memory and disk sizes."""

from __future__ import annotations

from actlab.errors import ActlabError

_UNITS = {
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}


def parse_bytes(text: str | int, field_name: str = "--memory-limit") -> int:
    """``"2GiB"``, ``"1500MB"``, ``"512mib"``, ``"1e9"`` -> bytes (binary units are 1024-based)."""
    if isinstance(text, int):
        value = text
    else:
        s = str(text).strip().lower().replace(" ", "")
        num = s.rstrip("abcdefghijklmnopqrstuvwxyz")
        unit = s[len(num) :] or "b"
        try:
            value = int(float(num) * _UNITS[unit])
        except (ValueError, KeyError):
            value = -1
    if value <= 0:
        raise ActlabError(
            "bad memory size",
            field=field_name,
            expected="a positive size such as 2GiB, 1500MiB or 3GB",
            found=text,
        )
    return value


def human_bytes(n: float) -> str:
    """``512 B``, ``1.5 KiB``, ``3.2 GiB``: 1024-based, one decimal (whole bytes below 1 KiB)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover
