"""The one reporting format shared by every ``actlab bench ...`` command.

A benchmark returns a result dict::

    {"benchmark": "data", "device": "cpu", "config": {...}, "metrics": {"samples_per_s": 9123.4, ...},
     "ratios": {"vs_lerobot": 57.0}, "notes": ["..."]}

``--json`` prints it as JSON; otherwise a short table of config, metrics and ratios.
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from actlab.utils.table import table


def _jsonable(o: Any) -> Any:
    return o.tolist() if hasattr(o, "tolist") else str(o)


def emit(result: dict[str, Any], as_json: bool, stream: TextIO | None = None) -> None:
    stream = stream or sys.stdout
    if as_json:
        stream.write(json.dumps(result, indent=2, default=_jsonable))
        stream.write("\n")
        return
    title = f"actlab bench {result.get('benchmark', '?')}"
    if "device" in result:
        title += f"  (device: {result['device']})"
    stream.write(title + "\n\n")
    for section in ("config", "metrics", "ratios"):
        values = result.get(section) or {}
        if values:
            rows = [(k, v) for k, v in values.items()]
            stream.write(table(rows, [section, "value"]) + "\n\n")
    for note in result.get("notes", []):
        stream.write(f"note: {note}\n")
