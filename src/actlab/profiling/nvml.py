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
