"""Run any command and sample every GPU (NVML) and the command's process tree (psutil) while it runs.

``actlab monitor -- CMD ARGS...`` is a thin CLI over :func:`run_monitored`. The command runs as a child of
this process with the same stdin/stdout/stderr; sampling happens in this process's main thread between
waits on the child, so a sample costs no thread and the loop wakes the moment the child exits. SIGINT,
SIGTERM and SIGHUP received here are forwarded to the child (SIGINT only when the terminal did not already
deliver it to the child, see :func:`_terminal_sent_it`), and the child's exit status is returned the way a
shell reports it (128 + N when it died of signal N).

Samples go to a CSV written through :func:`actlab.utils.io.atomic_file`: rows are flushed to a temporary
file beside the target as they come (so a long run can be inspected while it runs, ``ls -a`` shows it),
and the file gets its final name only when the run is over, complete.
"""

from __future__ import annotations

import contextlib
import csv
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from actlab.errors import ActlabError
from actlab.profiling.nvml import GpuSet, gpu_columns, open_gpus
from actlab.utils.io import atomic_file
from actlab.utils.procs import ChildGuard

_MIB = 1024 * 1024

# Columns every CSV has, before the per-GPU ones.
BASE_COLUMNS: tuple[str, ...] = (
    "timestamp",  # wall clock, ISO 8601 UTC with milliseconds
    "unix_time",  # the same instant in seconds since the epoch
    "elapsed_s",  # seconds since the command was started
    "proc_cpu_pct",  # CPU of the command and all its descendants; 100 = one core busy
    "proc_rss_mib",  # resident memory summed over the command's process tree (shared pages once per process)
    "proc_count",  # processes in the tree (the command plus descendants still alive)
    "host_cpu_pct",  # whole machine, 0-100 averaged over all cores
    "host_mem_used_mib",  # whole machine, memory in use
)

_FORWARDED_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")
# Seconds a command has to exit after a forwarded SIGINT/SIGTERM/SIGHUP before the monitor kills its whole
# process tree (SIGKILL): a command that ignores the signal would otherwise keep the monitor waiting forever.
STOP_GRACE_S = 10.0


@dataclass
class MonitorRun:
    """Everything one monitored run produced; ``rows`` align with ``columns``."""

    command: list[str]  # the command as run
    interval_s: float  # requested seconds between samples
    columns: list[str]  # CSV header
    rows: list[list[Any]] = field(default_factory=list)  # one per sample; None for an unreadable field
    gpu_names: list[str] = field(default_factory=list)  # NVML names, index order
    gpu_reason: str | None = None  # why no GPU was sampled (None when GPUs were found)
    exit_code: int = 0  # shell-style: the child's status, or 128 + N when it died of signal N
    signal_name: str | None = None  # the signal that ended the child, if any
    duration_s: float = 0.0  # from start to exit of the command
    started_at: str = ""  # ISO 8601 UTC
    csv_path: Path | None = None  # where the samples were written, if anywhere

    def column(self, name: str) -> list[Any]:
        i = self.columns.index(name)
        return [r[i] for r in self.rows]


def parse_interval(text: str | float) -> float:
    """Validate a sampling interval in seconds (a finite number > 0); an ActlabError otherwise."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ActlabError(
            "the sampling interval must be a positive number of seconds",
            field="--interval",
            expected="a number > 0, e.g. 0.5",
            found=text,
            fix="pass --interval 0.5 (NVML refreshes utilization every 1/6 s to 1 s)",
        )
    if value < 0.01:
        raise ActlabError(
            "the sampling interval is too short to be meaningful",
            field="--interval",
            expected=">= 0.01 s",
            found=text,
            fix="use 0.1 s or more; NVML refreshes utilization every 1/6 s to 1 s",
        )
    return value


def check_command(command: Sequence[str]) -> list[str]:
    """Strip a leading ``--`` and check that there is a command and that its program exists."""
    cmd = list(command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise ActlabError(
            "no command to monitor",
            field="CMD",
            expected="a command after --",
            found="nothing",
            fix="e.g. actlab monitor --interval 0.5 -- actlab train --preset tiny",
        )
    prog = cmd[0]
    if os.sep in prog:
        if not os.path.isfile(prog):
            raise ActlabError(f"command not found: {prog}", field="CMD", fix="check the path")
        if not os.access(prog, os.X_OK):
            raise ActlabError(f"command is not executable: {prog}", field="CMD", fix=f"chmod +x {prog}")
    elif shutil.which(prog) is None:
        raise ActlabError(
            f"command not found: {prog}",
            field="CMD",
            found=prog,
            fix="check the spelling, or activate the environment that provides it (it must be on PATH)",
        )
    return cmd


class ProcessTreeSampler:
    """CPU % and RSS summed over a process and all its descendants, from per-process CPU-time deltas."""

    def __init__(self, root_pid: int) -> None:
        import psutil

        self._psutil = psutil
        self._root = psutil.Process(root_pid)
        self._cpu_s: dict[tuple[int, float], float] = {}  # (pid, create_time) -> CPU seconds last seen
        self._last_t = time.monotonic()
        self.descendants: list[Any] = []  # the root's descendants at the last listing

    def _tree(self) -> list[Any]:
        ps = self._psutil
        try:
            self.descendants = self._root.children(recursive=True)
        except ps.Error:  # the root just exited
            return []
        return [self._root, *self.descendants]

    def sample(self) -> tuple[float | None, float | None, int]:
        """(cpu_pct over the time since the last call, rss_mib now, process count); CPU and RSS are None
        when no process of the tree could be read (the command is exiting)."""
        ps = self._psutil
        now = time.monotonic()
        window = max(now - self._last_t, 1e-6)
        self._last_t = now
        cpu_delta, rss, seen = 0.0, 0, {}
        for proc in self._tree():
            try:
                with proc.oneshot():
                    if proc.status() == ps.STATUS_ZOMBIE:  # exited, not yet reaped: reads as 0 B
                        continue
                    key = (proc.pid, proc.create_time())
                    times = proc.cpu_times()
                    mem = proc.memory_info().rss
            except ps.Error:  # exited or became a zombie between listing and reading
                continue
            total = times.user + times.system
            # A process first seen now contributes all its CPU time so far (it started within the window).
            cpu_delta += total - self._cpu_s.get(key, 0.0)
            seen[key] = total
            rss += mem
        self._cpu_s = seen
        if not seen:
            return None, None, 0
        return 100.0 * cpu_delta / window, rss / _MIB, len(seen)


def _terminal_sent_it() -> bool:
    """True when we are the terminal's foreground process group: a Ctrl-C then reached the child too.

    The child shares our process group (so it keeps reading the terminal normally); forwarding a SIGINT the
    terminal already delivered would interrupt the child twice (a Python program would abort its cleanup).
    """
    for stream in (sys.stdin, sys.stdout, sys.stderr):
        try:
            return os.tcgetpgrp(stream.fileno()) == os.getpgrp()
        except (OSError, AttributeError, ValueError):
            continue
    return False


class _SignalForwarder:
    """Forward SIGINT/SIGTERM/SIGHUP to the child while the block runs (main thread only).

    The handlers are installed *before* the child starts: a signal arriving between the start and the
    installation would otherwise kill the monitor with its default action and orphan the child. Signals
    that arrive before :meth:`attach` are delivered to the child as soon as it exists.
    """

    def __init__(self) -> None:
        self._child: subprocess.Popen | None = None
        self._pending: list[int] = []
        self._previous: dict[int, Any] = {}
        self.stop_at: float | None = None  # monotonic time of the first stop signal received
        self.stop_name = ""  # its name, for the note when the command has to be killed

    def _handler(self, signum: int, _frame: object) -> None:
        if self.stop_at is None:
            self.stop_at, self.stop_name = time.monotonic(), signal.Signals(signum).name
        if signum == signal.SIGINT and _terminal_sent_it():
            return
        if self._child is None:
            self._pending.append(signum)
            return
        with contextlib.suppress(ProcessLookupError):
            self._child.send_signal(signum)

    def attach(self, child: subprocess.Popen) -> None:
        self._child = child
        for signum in self._pending:
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signum)
        self._pending.clear()

    def __enter__(self) -> _SignalForwarder:
        if threading.current_thread() is threading.main_thread():
            for name in _FORWARDED_SIGNALS:
                sig = getattr(signal, name, None)
                if sig is not None:
                    self._previous[sig] = signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._previous.items():
            signal.signal(sig, old)
        self._previous.clear()


def _cell(value: Any, name: str) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if name in ("unix_time", "elapsed_s"):
        return f"{value:.3f}"
    if isinstance(value, int):
        return str(value)
    return f"{value:.2f}"


def _host_sample(psutil: Any) -> tuple[float, float]:
    return psutil.cpu_percent(interval=None), psutil.virtual_memory().used / _MIB


def _take_sample(tree: ProcessTreeSampler, gpus: GpuSet, started: float, psutil: Any) -> list[Any]:
    wall = time.time()
    stamp = datetime.fromtimestamp(wall, tz=timezone.utc).isoformat(timespec="milliseconds")
    cpu, rss, count = tree.sample()
    host_cpu, host_mem = _host_sample(psutil)
    row: list[Any] = [stamp, wall, time.monotonic() - started, cpu, rss, count, host_cpu, host_mem]
    for i in range(gpus.count):
        row.extend(gpus.read(i).values())
    return row


def _exit_status(returncode: int) -> tuple[int, str | None]:
    if returncode >= 0:
        return returncode, None
    sig = -returncode
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = f"signal {sig}"
    return 128 + sig, name


def _stop_child(child: subprocess.Popen) -> None:
    """Used only when the monitor itself fails: ask the child to stop, then make sure it does."""
    if child.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        child.terminate()
    try:
        child.wait(timeout=10)
    except subprocess.TimeoutExpired:
        child.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=10)  # SIGKILL: only a process stuck in the kernel outlives it


def run_monitored(
    command: Sequence[str],
    interval_s: float = 0.5,
    csv_path: str | Path | None = None,
    on_sample: Callable[[list[Any]], None] | None = None,
) -> MonitorRun:
    """Run ``command`` to completion, sampling every ``interval_s`` seconds; return the samples.

    The child inherits stdin/stdout/stderr and the environment. If the monitor itself fails (for example
    the disk fills while writing the CSV) the child is terminated rather than left running unwatched.
    """
    import psutil

    interval_s = parse_interval(interval_s)
    cmd = check_command(command)
    gpus = open_gpus()
    run = MonitorRun(
        command=cmd,
        interval_s=interval_s,
        columns=[*BASE_COLUMNS, *gpu_columns(gpus.count)],
        gpu_names=list(gpus.names),
        gpu_reason=gpus.reason,
        csv_path=Path(csv_path) if csv_path is not None else None,
    )
    psutil.cpu_percent(interval=None)  # primes the host CPU counter; its first reading is meaningless
    with gpus, contextlib.ExitStack() as stack:
        writer, stream = None, None
        if csv_path is not None:
            stream = stack.enter_context(atomic_file(csv_path, "w"))
            writer = csv.writer(stream, lineterminator="\n")
            writer.writerow(run.columns)
        run.started_at = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
        forwarder = stack.enter_context(_SignalForwarder())
        started = time.monotonic()
        try:
            child = subprocess.Popen(cmd)
        except OSError as e:  # vanished or not executable between the check and the start
            problem = f"could not start {cmd[0]}: {e.strerror or e}"
            raise ActlabError(problem, field="CMD", found=cmd[0]) from e
        forwarder.attach(child)
        guard = ChildGuard(child, group=False)  # a kill -9 of the monitor ends the command too
        try:
            _sample_until_exit(
                child, interval_s, started, gpus, psutil, run, writer, stream, on_sample, forwarder
            )
        except BaseException:
            _stop_child(child)
            raise
        finally:
            guard.disarm()
        run.duration_s = time.monotonic() - started
        run.exit_code, run.signal_name = _exit_status(child.returncode)
    return run


def _sample_until_exit(
    child: subprocess.Popen,
    interval_s: float,
    started: float,
    gpus: GpuSet,
    psutil: Any,
    run: MonitorRun,
    writer: Any,
    stream: Any,
    on_sample: Callable[[list[Any]], None] | None,
    forwarder: _SignalForwarder | None = None,
) -> None:
    tree = ProcessTreeSampler(child.pid)
    next_t = started
    while child.poll() is None:
        stop_at = forwarder.stop_at if forwarder is not None else None
        if stop_at is not None and time.monotonic() - stop_at >= STOP_GRACE_S:
            _kill_tree(child, psutil, run.command, forwarder.stop_name)
            break
        row = _take_sample(tree, gpus, started, psutil)
        run.rows.append(row)
        if writer is not None:
            writer.writerow([_cell(v, c) for v, c in zip(row, run.columns)])
            stream.flush()  # visible in the temporary file while the run goes on
        if on_sample is not None:
            on_sample(row)
        # Fixed schedule (no drift); if a sample took longer than the interval, skip the missed ticks.
        next_t += interval_s
        now = time.monotonic()
        if next_t <= now:
            next_t = now + interval_s - (now - next_t) % interval_s
        wait_s = next_t - now
        if forwarder is not None and forwarder.stop_at is not None:  # wake up at the end of the grace
            wait_s = min(wait_s, max(forwarder.stop_at + STOP_GRACE_S - now, 0.0))
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=wait_s)  # returns at once when the child exits
    if forwarder is not None and forwarder.stop_at is not None:
        _kill_descendants(tree.descendants, psutil)


def _kill_tree(child: subprocess.Popen, psutil: Any, command: list[str], stop_name: str) -> None:
    """SIGKILL a command that did not exit within STOP_GRACE_S of a stop signal, and every process it
    started (listed first: a killed parent's children are re-parented and could no longer be found)."""
    try:
        descendants = psutil.Process(child.pid).children(recursive=True)
    except psutil.Error:
        descendants = []
    with contextlib.suppress(ProcessLookupError):
        child.kill()
    _kill_descendants(descendants, psutil)
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(timeout=10)  # SIGKILL: only a process stuck in the kernel outlives it
    print(
        f"actlab monitor: `{shlex.join(command)}` did not exit within {STOP_GRACE_S:.0f} s of {stop_name}:"
        f" killed it and {len(descendants)} process(es) it started (SIGKILL)",
        file=sys.stderr,
        flush=True,
    )


def _kill_descendants(procs: list[Any], psutil: Any) -> None:
    """SIGKILL the processes of a stopped command's tree that outlived it (psutil checks each one is
    still the process it listed, not a new one with a reused pid)."""
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            if proc.is_running():
                proc.kill()


def read_monitor_csv(path: str | Path) -> tuple[list[str], list[list[Any]]]:
    """Read a monitor CSV back: (columns, rows) with numbers as floats and empty cells as None."""
    path = Path(path)
    if not path.is_file():
        raise ActlabError("monitor CSV not found", file=path, fix="check the path given to --out")
    with open(path, newline="") as f:
        reader = csv.reader(f)
        try:
            columns = next(reader)
        except StopIteration:
            raise ActlabError("monitor CSV is empty", file=path, expected="a header row") from None
        missing = [c for c in ("timestamp", "elapsed_s") if c not in columns]
        if missing:
            raise ActlabError(
                "not an actlab monitor CSV",
                file=path,
                field="header",
                expected="timestamp, elapsed_s, ...",
                found=", ".join(columns[:5]),
            )
        rows = []
        for line_no, cells in enumerate(reader, start=2):
            if len(cells) != len(columns):
                raise ActlabError(
                    "monitor CSV row has the wrong number of cells",
                    file=path,
                    field=f"line {line_no}",
                    expected=len(columns),
                    found=len(cells),
                )
            rows.append(
                [c if name == "timestamp" else (float(c) if c else None) for c, name in zip(cells, columns)]
            )
    return columns, rows
