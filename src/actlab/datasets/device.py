"""DeviceData: batches gathered by index on the training device (torch tensors, no torch.nn).

All window math runs on the device with tensor ops: per-frame episode start/stop tensors, an offsets
tensor per key, clamp, ``<key>_is_pad``. No Python loop over the batch and no host sync in
:meth:`DeviceData.gather` when the frames are on the device. Images are read only at the offsets asked
for (a key with offsets ``[0]`` reads one frame per sample, whatever other keys ask).

When the FrameStore does not fit on the device, images stay in the memory-mapped file: a background
thread (:meth:`DeviceData.batches`) gathers the rows into pinned host buffers and copies them with
``non_blocking``; on a CPU-only machine the memmap is read directly.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from actlab.datasets import format as fmt
from actlab.datasets.sampler import window_indices
from actlab.errors import ActlabError
from actlab.utils.config import did_you_mean

if TYPE_CHECKING:
    import torch

    from actlab.datasets.framestore import FrameStore
    from actlab.datasets.reader import LeRobotV3Dataset
    from actlab.datasets.sampler import EpisodeSampler

# Device memory left free when deciding whether the frames fit ("auto"): activations need room too.
_DEVICE_MARGIN_FRAC = 0.25
_DEVICE_MARGIN_BYTES = 2 << 30


def _free_device_bytes(device: torch.device) -> int:
    import torch

    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    import psutil

    return int(psutil.virtual_memory().available)


def _pinned_ok(device: torch.device) -> bool:
    import torch

    return device.type == "cuda" and torch.cuda.is_available()


class DeviceData:
    """Gathers training batches by global frame index.

    ``deltas`` maps every key to fetch to its frame offsets (``policy.delta_indices``). A key with
    offsets exactly ``[0]`` comes back as the current frame, ``(B, ...)``; any other list gives a window
    ``(B, T, ...)`` plus ``<key>_is_pad`` ``(B, T)`` bool. Images are uint8 ``(B, [T,] C, H, W)``; float
    features float32. ``frames_on_device``: ``"auto"`` (copy the FrameStore to the device when it fits
    in ``max_device_bytes``, default free memory minus a margin), ``True`` or ``False``.
    ``feature_override`` substitutes a per-frame tensor ``(N, ...)`` (e.g. frozen-backbone features) for a
    key; it is gathered with that key's offsets.
    """

    def __init__(
        self,
        ds: LeRobotV3Dataset,
        store: FrameStore | None,
        deltas: Mapping[str, Sequence[int]],
        device: Any = "cpu",
        frames_on_device: bool | str = "auto",
        feature_override: Mapping[str, Any] | None = None,
        max_device_bytes: int | None = None,
    ) -> None:
        import torch

        self.device = torch.device(device)
        self.n = len(ds)
        overrides = dict(feature_override or {})
        self._check_keys(ds, store, deltas, overrides)
        self.windowed = {k: list(v) != [0] for k, v in deltas.items()}
        # (T,) int64 per key, on the device; equal offset lists share one tensor (and one window).
        self._offsets = {
            k: torch.as_tensor(list(v), dtype=torch.int64, device=self.device) for k, v in deltas.items()
        }
        self._offsets_np = {k: np.asarray(list(v), dtype=np.int64) for k, v in deltas.items()}
        self._ep_start = torch.tensor(ds.frame_episode_start, device=self.device)  # (N,)
        self._ep_stop = torch.tensor(ds.frame_episode_stop, device=self.device)  # (N,)
        self._ep_start_np = ds.frame_episode_start
        self._ep_stop_np = ds.frame_episode_stop
        self._tables: dict[str, torch.Tensor] = {}
        for key in deltas:
            if key in overrides:
                table = overrides[key]
                if isinstance(table, np.ndarray) and not table.flags.writeable:
                    # a read-only column (a memory map): torch warned "The given NumPy array is not
                    # writable ... undefined behavior" into a correction head's training
                    table = np.array(table)
                self._tables[key] = torch.as_tensor(table).to(self.device)
            elif not fmt.is_camera(ds.features[key]):
                col = ds.column(key)
                if key in fmt.DEFAULT_FEATURES and col.shape[1:] == (1,):
                    col = col[:, 0]  # timestamp, frame_index, ...: scalars per frame, as in get_item
                if np.issubdtype(col.dtype, np.floating):
                    col = col.astype(np.float32)
                self._tables[key] = torch.tensor(col, device=self.device)  # a copy: columns are read-only
        self.image_keys = [k for k in deltas if k not in overrides and fmt.is_camera(ds.features[k])]
        self.frames_on_device = self._decide_placement(store, frames_on_device, max_device_bytes)
        self._host_frames: dict[str, torch.Tensor] = {}
        for key in self.image_keys:
            assert store is not None
            # Copy-on-write mapping: torch.from_numpy warns on read-only arrays; nothing is ever written.
            host = torch.from_numpy(np.load(store.root / store.meta["keys"][key]["file"], mmap_mode="c"))
            self._host_frames[key] = host  # (N, C, H, W) uint8, memory-mapped
            if self.frames_on_device:
                self._tables[key] = self._to_device(host)

    # ------------------------------------------------------------------------------------------ setup

    def _check_keys(self, ds, store, deltas, overrides) -> None:
        for key, offs in deltas.items():
            if key not in ds.features and key not in overrides:
                raise ActlabError(
                    f"unknown key {key!r}{did_you_mean(key, ds.features)}",
                    file=ds.root / fmt.INFO_PATH,
                    field="deltas",
                    expected="one of " + ", ".join(ds.features),
                    found=key,
                )
            if len(list(offs)) == 0:
                raise ActlabError("empty offset list", field=f"deltas.{key}", expected="at least one offset")
            if key in overrides:
                n = len(overrides[key])
                if n != len(ds):
                    raise ActlabError(
                        "feature_override needs one row per dataset frame",
                        field=f"feature_override.{key}",
                        expected=len(ds),
                        found=n,
                    )
            elif (
                key in ds.features
                and fmt.is_camera(ds.features[key])
                and (store is None or key not in store.frames)
            ):
                raise ActlabError(
                    f"camera {key!r} is not in the frame store",
                    field="store",
                    expected=f"a FrameStore with {key}",
                    found="none" if store is None else list(store.frames),
                    fix="build it with FrameStore.build(ds) or `actlab data cache PATH`",
                )
            elif (
                key in ds.features
                and not fmt.is_numeric(ds.features[key])
                and not fmt.is_camera(ds.features[key])
            ):
                raise ActlabError("string features cannot be batched", field=f"deltas.{key}")

    def _decide_placement(self, store, frames_on_device, max_device_bytes) -> bool:
        if not self.image_keys:
            return True
        nbytes = sum(store.frames[k].nbytes for k in self.image_keys)
        if frames_on_device == "auto":
            if self.device.type == "cpu":
                return False  # the memmap is already host memory: gather straight from it
            budget = max_device_bytes
            if budget is None:
                free = _free_device_bytes(self.device)
                budget = int(free * (1 - _DEVICE_MARGIN_FRAC)) - _DEVICE_MARGIN_BYTES
            return nbytes <= budget
        if frames_on_device not in (True, False):
            raise ActlabError(
                "frames_on_device must be auto, True or False",
                field="frames_on_device",
                found=frames_on_device,
            )
        return bool(frames_on_device)

    def _to_device(self, host: torch.Tensor) -> torch.Tensor:
        import torch

        if self.device.type == "cpu":
            return host.clone()  # into RAM, off the page cache
        out = torch.empty(host.shape, dtype=host.dtype, device=self.device)
        step = max(1, (256 << 20) // max(1, host[0].numel()))  # copy in ~256 MiB slices
        for i in range(0, host.shape[0], step):
            out[i : i + step].copy_(host[i : i + step])
        return out

    # ----------------------------------------------------------------------------------------- gather

    def _windows(self, idx: torch.Tensor) -> dict[str, tuple[torch.Tensor, torch.Tensor | None]]:
        """Rows (B, T) (or (B,) for current-frame keys) and pad masks, all on the device."""
        import torch

        start = self._ep_start[idx][:, None]  # (B, 1)
        last = self._ep_stop[idx][:, None] - 1  # (B, 1)
        out: dict[str, tuple[torch.Tensor, torch.Tensor | None]] = {}
        cache: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor]] = {}
        for key, off in self._offsets.items():
            if not self.windowed[key]:
                out[key] = (idx, None)
                continue
            sig = tuple(self._offsets_np[key].tolist())
            if sig not in cache:
                raw = idx[:, None] + off[None, :]  # (B, T)
                rows = torch.minimum(torch.maximum(raw, start), last)
                cache[sig] = (rows, (raw < start) | (raw > last))
            out[key] = cache[sig]
        return out

    def _assemble(self, idx: torch.Tensor, host_images: Mapping[str, torch.Tensor] | None) -> dict:
        batch: dict[str, torch.Tensor] = {"index": idx}
        for key, (rows, pad) in self._windows(idx).items():
            if key in self._tables:
                batch[key] = self._tables[key][rows]  # (B, [T,] ...)
            else:
                assert host_images is not None
                batch[key] = host_images[key].to(self.device, non_blocking=True)
            if pad is not None:
                batch[f"{key}_is_pad"] = pad
        return batch

    def _gather_host_images(self, idx_np: np.ndarray) -> dict[str, torch.Tensor]:
        """Images for ``idx_np`` (B,) read from the memmap into (pinned, when useful) host tensors."""
        import torch

        out = {}
        pin = _pinned_ok(self.device)
        for key in self.image_keys:
            offs = self._offsets_np[key]
            if self.windowed[key]:
                rows, _ = window_indices(idx_np, offs, self._ep_start_np[idx_np], self._ep_stop_np[idx_np])
            else:
                rows = idx_np
            src = self._host_frames[key]
            flat = torch.from_numpy(np.ascontiguousarray(rows.reshape(-1)))
            buf = torch.empty((flat.numel(), *src.shape[1:]), dtype=src.dtype, pin_memory=pin)
            torch.index_select(src, 0, flat, out=buf)
            out[key] = buf.view(*rows.shape, *src.shape[1:])
        return out

    def gather(self, idx: torch.Tensor | np.ndarray) -> dict[str, torch.Tensor]:
        """The batch of frames ``idx`` (B,) as a dict of tensors on the device.

        With every table on the device this never syncs with the host. On the memmap path the indices
        are read on the host first (one sync when ``idx`` lives on a GPU); prefer :meth:`batches` there.
        """
        import torch

        if isinstance(idx, np.ndarray):
            idx_np = idx.astype(np.int64, copy=False)
            idx = torch.from_numpy(idx_np).to(self.device, non_blocking=True)
        else:
            idx_np = None
            idx = idx.to(self.device, non_blocking=True)
        host = None
        if not self.frames_on_device:
            if idx_np is None:
                idx_np = idx.cpu().numpy()  # host sync: the memmap is read by the CPU
            host = self._gather_host_images(idx_np)
        return self._assemble(idx, host)

    def batches(
        self, sampler: EpisodeSampler, batch_size: int, steps: int | None = None, prefetch: int = 2
    ) -> Iterator[tuple[dict[str, torch.Tensor], dict[str, Any]]]:
        """Yield ``(batch, sampler_state)`` pairs drawn from ``sampler``; on the memmap path a background
        thread prefetches images.

        ``sampler_state`` is the sampler's state right after that batch was drawn: what to save to resume
        with exactly the next batch. The sampler itself runs ahead of the consumer by up to ``prefetch``
        batches, so ``sampler.state_dict()`` is not that position.

        Why a thread: reading the memmap (page cache or disk) overlaps the training step; the copy to the
        GPU is non_blocking from pinned memory, so neither side waits for the other.
        """
        import torch

        if self.frames_on_device:
            count = 0
            while steps is None or count < steps:
                idx_np = sampler.next_batch(batch_size)
                state = sampler.state_dict()
                yield self.gather(idx_np), state
                count += 1
            return
        q: queue.Queue = queue.Queue(maxsize=max(1, prefetch))
        stop = threading.Event()

        def produce() -> None:
            count = 0
            try:
                while not stop.is_set() and (steps is None or count < steps):
                    idx_np = sampler.next_batch(batch_size)
                    state = sampler.state_dict()
                    q.put((idx_np, state, self._gather_host_images(idx_np)))
                    count += 1
                q.put(None)
            except BaseException as e:
                q.put(e)

        thread = threading.Thread(target=produce, name="actlab-prefetch", daemon=True)
        thread.start()
        try:
            while True:
                item = q.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                idx_np, state, host = item
                idx = torch.from_numpy(idx_np).to(self.device, non_blocking=True)
                yield self._assemble(idx, host), state
        finally:
            stop.set()
            while thread.is_alive():
                try:
                    q.get_nowait()
                except queue.Empty:
                    thread.join(timeout=0.01)
