"""The one reporting format shared by every ``actlab bench ...`` command.

A benchmark returns a result dict::

    {"benchmark": "data", "device": "cpu", "config": {...}, "metrics": {"samples_per_s": 9123.4, ...},
     "ratios": {"vs_lerobot": 57.0}, "notes": ["..."]}

``--json`` prints it as JSON; otherwise a short table of config, metrics and ratios, then the notes.
``benchmark`` and ``metrics`` are required; ``device``, ``config``, ``ratios`` and ``notes`` are optional.
Throughput is reported as ``samples_per_s``; on GPUs ``actlab.profiling.flops.throughput_metrics`` adds
``achieved_tflops``, ``peak_tflops`` and ``mfu`` (a fraction, 0-1).
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from actlab.utils.table import table

SECTIONS = ("config", "metrics", "ratios")


def _jsonable(o: Any) -> Any:
    return o.tolist() if hasattr(o, "tolist") else str(o)


def make_result(
    benchmark: str,
    metrics: dict[str, Any],
    *,
    device: str | None = None,
    config: dict[str, Any] | None = None,
    ratios: dict[str, Any] | None = None,
    notes: list[str] | None = None,
) -> dict[str, Any]:
    """Build a result dict in the shared format (keys in the documented order)."""
    result: dict[str, Any] = {"benchmark": benchmark}
    if device is not None:
        result["device"] = device
    result["config"] = dict(config or {})
    result["metrics"] = dict(metrics)
    result["ratios"] = dict(ratios or {})
    result["notes"] = list(notes or [])
    check_result(result)
    return result


def check_result(result: dict[str, Any]) -> None:
    """Raise ValueError if ``result`` does not follow the shared format (a programming error)."""
    if not isinstance(result.get("benchmark"), str) or not result["benchmark"]:
        raise ValueError("bench result needs a non-empty 'benchmark' name")
    if not isinstance(result.get("metrics"), dict):
        raise ValueError("bench result needs a 'metrics' dict")
    for section in SECTIONS:
        if section in result and not isinstance(result[section], dict):
            raise ValueError(f"bench result section {section!r} must be a dict")
    notes = result.get("notes", [])
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise ValueError("bench result 'notes' must be a list of strings")


def _cell(value: Any) -> Any:
    # Nested values (a per-phase dict, a list of shapes) print as compact JSON in the table.
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, default=_jsonable, separators=(", ", ": "))
    return value


def emit(result: dict[str, Any], as_json: bool, stream: TextIO | None = None) -> None:
    """Print ``result`` as JSON (``--json``) or as a short table followed by its notes."""
    check_result(result)
    stream = stream or sys.stdout
    if as_json:
        stream.write(json.dumps(result, indent=2, default=_jsonable))
        stream.write("\n")
        return
    # "command": the command that produced it, when it is not `actlab bench <benchmark>`
    title = result.get("command") or f"actlab bench {result.get('benchmark', '?')}"
    if "device" in result:
        title += f"  (device: {result['device']})"
    stream.write(title + "\n\n")
    for section in SECTIONS:
        values = result.get(section) or {}
        if values:
            rows = [(k, _cell(v)) for k, v in values.items()]
            stream.write(table(rows, [section, "value"]) + "\n\n")
    for note in result.get("notes", []):
        stream.write(f"note: {note}\n")
