"""GPU readings through NVML (package ``nvidia-ml-py``, module ``pynvml``), loaded lazily.

NVML missing, no driver or no device is a normal situation (a laptop, CI): :func:`open_gpus` then returns
no GPUs and the reason, never raises. Each field is read on its own with its own ``try``: a GPU that does
not report power or a clock (some consumer and MIG devices) gives an empty cell for that field only.

NVML's ``utilization.gpu`` is the fraction of the last sample period (1/6 s to 1 s depending on the
product) during which at least one kernel ran; it is not SM occupancy. A GPU at "100%" running one tiny
kernel at a time is still mostly idle silicon. Model FLOPs utilization (``actlab.profiling.flops``) is the
complementary measure.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

# Per-GPU CSV columns, in order; the CSV names them ``gpu<i>_<field>``.
GPU_FIELDS: tuple[str, ...] = (
    "util_pct",  # NVML utilization.gpu: % of the sample period a kernel was running
    "mem_util_pct",  # NVML utilization.memory: % of the period device memory was read or written
    "mem_used_mib",  # device memory in use by all processes (MiB)
    "mem_total_mib",  # device memory size (MiB)
    "sm_clock_mhz",  # current SM clock (MHz); drops under thermal or power throttling
    "power_w",  # board power draw (W)
    "temp_c",  # GPU core temperature (degrees C)
)

_MIB = 1024 * 1024


@dataclass
class GpuSet:
    """The GPUs NVML sees, or the reason it sees none. Close it when done (or use it as a context)."""

    names: list[str] = field(default_factory=list)  # one name per GPU, NVML index order
    reason: str | None = None  # why there are no GPUs (None when NVML initialised and found some)
    _nvml: Any = None  # the pynvml module once initialised
    _handles: list[Any] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self._handles)

    def read(self, index: int) -> dict[str, float | None]:
        """One reading of every :data:`GPU_FIELDS` for GPU ``index``; unsupported fields are None."""
        nv, h = self._nvml, self._handles[index]
        out: dict[str, float | None] = dict.fromkeys(GPU_FIELDS)
        with contextlib.suppress(Exception):
            rates = nv.nvmlDeviceGetUtilizationRates(h)
            out["util_pct"] = float(rates.gpu)
            out["mem_util_pct"] = float(rates.memory)
        with contextlib.suppress(Exception):
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            out["mem_used_mib"] = mem.used / _MIB
            out["mem_total_mib"] = mem.total / _MIB
        with contextlib.suppress(Exception):
            out["sm_clock_mhz"] = float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
        with contextlib.suppress(Exception):
            out["power_w"] = nv.nvmlDeviceGetPowerUsage(h) / 1000.0  # NVML reports milliwatts
        with contextlib.suppress(Exception):
            out["temp_c"] = float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))
        return out

    def close(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
            self._nvml = None
            self._handles = []

    def __enter__(self) -> GpuSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_gpus() -> GpuSet:
    """Initialise NVML and get a handle per GPU; on any failure return an empty set with the reason."""
    try:
        import pynvml
    except ImportError as e:  # the dependency is declared, but a broken install should not stop a run
        return GpuSet(reason=f"nvidia-ml-py is not importable ({e})")
    try:
        pynvml.nvmlInit()
    except Exception as e:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
        return GpuSet(reason=str(e) or type(e).__name__)
    gpus = GpuSet(_nvml=pynvml)
    try:
        count = pynvml.nvmlDeviceGetCount()
        for i in range(count):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            gpus._handles.append(h)
            gpus.names.append(name.decode() if isinstance(name, bytes) else str(name))
    except Exception as e:
        gpus.close()
        return GpuSet(reason=f"NVML initialised but listing devices failed: {e}")
    if not gpus._handles:
        gpus.close()
        return GpuSet(reason="NVML initialised but reports 0 devices")
    return gpus


def gpu_columns(count: int) -> list[str]:
    """CSV column names for ``count`` GPUs: ``gpu0_util_pct, gpu0_mem_util_pct, ...``."""
    return [f"gpu{i}_{f}" for i in range(count) for f in GPU_FIELDS]


class UtilSampler:
    """NVML ``utilization.gpu`` of one GPU sampled on a background thread, kept with wall-clock times.

    ``median(t0, t1)`` is the median over the samples taken in a window (``time.time()`` seconds), so one
    sampler can measure several phases of a run (actlab's steps, then a child process's). Without NVML or
    a GPU it samples nothing and every median is None (print "n/a"); ``reason`` says why.
    """

    def __init__(self, index: int = 0, interval_s: float = 0.1) -> None:
        import threading

        self.index, self.interval_s = index, interval_s
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._gpus = open_gpus()
        self.reason = self._gpus.reason
        if self.reason is None and index >= self._gpus.count:
            self.reason = f"NVML sees {self._gpus.count} GPU(s), not index {index}"
        self._thread = None
        if self.reason is None:
            self._thread = threading.Thread(target=self._run, name="nvml-util", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        import time

        while not self._stop.is_set():
            util = self._gpus.read(self.index).get("util_pct")
            if util is not None:
                self.samples.append((time.time(), util))
            self._stop.wait(self.interval_s)

    def median(self, t0: float, t1: float) -> float | None:
        """Median utilization (%) of the samples taken between ``t0`` and ``t1``; None without any."""
        import statistics

        inside = [u for t, u in list(self.samples) if t0 <= t <= t1]
        return statistics.median(inside) if inside else None

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._gpus.close()

    def __enter__(self) -> UtilSampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
