"""Where metrics go: ``metrics.jsonl`` always, a progress bar, TensorBoard and W&B when asked.

Only rank 0 constructs a :class:`MetricsLog` with ``enabled=True``; other ranks get a no-op one, so the
loop never branches on the rank when it logs. Each row is one JSON object per line, flushed at once, so a
killed run keeps every row it logged. On resume, rows past the resumed step (written by the killed run
after its last checkpoint) are dropped, so the file reads as one continuous curve.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from actlab.errors import ActlabError
from actlab.utils.io import atomic_write_text, name_file
from actlab.utils.progress import progress_bar

METRICS_FILE = "metrics.jsonl"


def read_metrics(path: str | Path, damaged: list[str] | None = None) -> list[dict[str, Any]]:
    """Rows of a ``metrics.jsonl`` (a run directory or the file itself); a torn last line is skipped.

    ``damaged``: None refuses a damaged line before the last (text that is not JSON, NUL bytes a crash
    left on disk) naming it and the ``sed`` that deletes it; a list collects every damaged line, torn last
    line included, as ``"line N: what"`` and skips it (a resume drops them and says which)."""
    path = Path(path)
    if path.is_dir():
        path = path / METRICS_FILE
    if not path.is_file():
        raise ActlabError("metrics file not found", file=path, fix="point at a run directory of actlab train")
    rows = []
    lines = path.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            if damaged is not None:
                damaged.append(f"line {i + 1}: {_what(line)}")
                continue
            if i == len(lines) - 1:  # a kill in the middle of a write leaves a partial last line
                break
            raise ActlabError(
                f"metrics.jsonl line {i + 1} is not JSON",
                file=path,
                expected="one JSON object per line",
                found=_what(line),
                fix=f"delete that line (`sed -i '{i + 1}d' {path}`); the run's checkpoints do not depend "
                "on it",
            ) from e
        step = row.get("step", 0) if isinstance(row, dict) else None
        if not isinstance(step, int) or isinstance(step, bool):  # `[1, 2]` was a traceback of a resume
            raise ActlabError(
                f"metrics.jsonl line {i + 1} is not a row of metrics",
                file=path,
                expected='a JSON object with an integer "step"',
                found=line[:80],
                fix="repair or delete that line (the run's checkpoints do not depend on it)",
            )
        rows.append(row)
    return rows


def _what(line: str) -> str:
    """A damaged line, printable: NUL bytes counted (they were printed raw, garbling the terminal)."""
    nuls = line.count("\0")
    if nuls == len(line):
        return f"{nuls} NUL bytes (zeros a crash left on disk)"
    text = repr(line[:80].replace("\0", ""))
    return f"{text} (cut short)" + (f", {nuls} NUL bytes" if nuls else "")


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)  # JSON has no NaN/inf; keep them visible rather than invalid
    return v


class MetricsLog:
    """JSONL writer + optional tqdm bar + optional TensorBoard / W&B sinks."""

    def __init__(
        self,
        run_dir: str | Path,
        *,
        enabled: bool,
        total_steps: int,
        start_step: int = 0,
        progress: bool = True,
        tensorboard: bool = False,
        wandb: bool = False,
        wandb_project: str = "actlab",
        run_config: dict[str, Any] | None = None,
    ) -> None:
        self.enabled = enabled
        self.path = Path(run_dir) / METRICS_FILE
        self._file = None
        self._bar = None
        self._tb = None
        self._wandb = None
        if not enabled:
            return
        check_sinks(tensorboard=tensorboard, wandb=wandb)  # before any file is touched
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._truncate_after(start_step)
        if tensorboard:
            self._tb = _open_tensorboard(Path(run_dir) / "tensorboard")
        if wandb:
            self._wandb = _open_wandb(wandb_project, Path(run_dir), run_config or {})
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (closed in close())
        if progress:
            self._bar = progress_bar(total_steps, "train", "step", initial=start_step)

    def _truncate_after(self, step: int) -> None:
        if not self.path.is_file():
            if step > 0 and not self.path.exists():
                # a resume whose metrics.jsonl is gone went on without a word: its curves then began at
                # the resumed step, as if the run had started there
                print(
                    f"note: {self.path} is missing: the metrics of steps 1-{step} are lost (the checkpoints "
                    f"do not depend on them); it holds the steps after {step} from now on",
                    file=sys.stderr,
                )
            return
        damaged: list[str] = []
        rows = read_metrics(self.path, damaged)
        kept = [r for r in rows if int(r.get("step", 0)) <= step]
        if damaged:
            # the rows are the damage (a stop cut a write short, a crash left zeros): dropped, and said
            print(
                f"note: {self.path}: dropped {len(damaged)} damaged line(s) ({'; '.join(damaged[:3])}"
                + (f"; and {len(damaged) - 3} more" if len(damaged) > 3 else "")
                + "); the checkpoints do not depend on them",
                file=sys.stderr,
            )
        if damaged or len(kept) != len(rows) or not self.path.read_text(encoding="utf-8").endswith("\n"):
            atomic_write_text(self.path, "".join(json.dumps(r) + "\n" for r in kept))

    def log(self, row: dict[str, Any]) -> None:
        """Append one row (must contain ``step``) to every sink."""
        if not self.enabled:
            return
        row = {k: _clean(v) for k, v in row.items()}
        try:
            self._file.write(json.dumps(row) + "\n")
            self._file.flush()
        except OSError as e:  # e.g. a full disk: name the file (a failed write names none)
            name_file(e, e.filename or str(self.path))
            raise
        step = int(row["step"])
        numeric = {k: v for k, v in row.items() if k != "step" and isinstance(v, (int, float))}
        if self._tb is not None:
            for k, v in numeric.items():
                self._tb.add_scalar(k, v, step)
        if self._wandb is not None:
            self._wandb.log(numeric, step=step)

    def progress(self, step: int, postfix: dict[str, Any] | None = None) -> None:
        """Move the progress bar to ``step``, with metric values read on logging steps only (no per-step
        host sync): the trainer calls it every step without ``postfix``, so that a bar at 2 s a step (a
        loaded CPU) does not stand still for a whole logging window."""
        if self._bar is None:
            return
        self._bar.update(step - self._bar.n)
        if postfix:
            self._bar.set_postfix(
                {k: f"{v:.4g}" if isinstance(v, float) else v for k, v in postfix.items()}, refresh=False
            )

    def message(self, text: str) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.write(text)
        else:
            print(text, file=sys.stderr, flush=True)  # stdout stays clean for --json

    def close(self) -> None:
        if self._file is not None:
            f, self._file = self._file, None
            try:
                f.close()  # flushes what a failed write left in the buffer: it can fail the same way
            except OSError as e:
                name_file(e, e.filename or str(self.path))
                raise
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None


def check_sinks(tensorboard: bool = False, wandb: bool = False) -> None:
    """Fail at once, naming the extra to install, when an enabled optional sink is not installed."""
    import importlib.util

    for enabled, module, extra in ((tensorboard, "tensorboard", "tensorboard"), (wandb, "wandb", "wandb")):
        if enabled and importlib.util.find_spec(module) is None:
            raise ActlabError(
                f"log.{extra}=true needs the {module} package",
                field=f"log.{extra}",
                expected=f"{module} installed",
                found="not installed",
                fix=f"pip install 'actlab[{extra}]'  (or set log.{extra}=false)",
            )


def _open_tensorboard(log_dir: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as e:
        raise ActlabError(
            "log.tensorboard=true needs the tensorboard package",
            field="log.tensorboard",
            fix="pip install 'actlab[tensorboard]'  (or set log.tensorboard=false)",
        ) from e
    return SummaryWriter(log_dir=str(log_dir))


def _open_wandb(project: str, run_dir: Path, config: dict[str, Any]):
    try:
        import wandb
    except ImportError as e:
        raise ActlabError(
            "log.wandb=true needs the wandb package",
            field="log.wandb",
            fix="pip install 'actlab[wandb]'  (or set log.wandb=false)",
        ) from e
    return wandb.init(project=project, dir=str(run_dir), config=config, name=run_dir.name)
