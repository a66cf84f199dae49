"""Multi-process data parallel training under torchrun (DDP), one process per device.

torchrun sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``; without them
the run is a single process and nothing here does anything. The backend is NCCL on CUDA and gloo on CPU
(the same code runs two CPU processes in the tests). Each rank samples a disjoint share of the episodes'
frames (EpisodeSampler rank/world_size); only rank 0 writes checkpoints and logs.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from actlab.errors import ActlabError
from actlab.utils.device import resolve_device
from actlab.utils.procs import stop_with_parent


@dataclasses.dataclass(frozen=True)
class DistInfo:
    """Where this process sits in the job."""

    # global rank of this process
    rank: int = 0
    # number of processes
    world_size: int = 1
    # rank on this machine (selects the GPU)
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def dist_info_from_env(env: dict[str, str] | None = None) -> DistInfo:
    """Read torchrun's variables; a plain ``python``/``actlab`` launch is rank 0 of 1."""
    env = os.environ if env is None else env
    try:
        world = int(env.get("WORLD_SIZE", "1"))
        rank = int(env.get("RANK", "0"))
        local = int(env.get("LOCAL_RANK", str(rank)))
    except ValueError as e:
        raise ActlabError(
            "torchrun environment variables are not integers",
            field="RANK/WORLD_SIZE/LOCAL_RANK",
            found=str(e),
        ) from e
    if not 0 <= rank < world:
        raise ActlabError("RANK must be in [0, WORLD_SIZE)", field="RANK", expected=f"< {world}", found=rank)
    return DistInfo(rank=rank, world_size=world, local_rank=local)


def setup(info: DistInfo, device_name: str):
    """Pick this process's device and, with several processes, join the process group.

    Returns the ``torch.device`` to train on.
    """
    import torch
    import torch.distributed as dist

    # Always an indexed device for CUDA (cuda:LOCAL_RANK under torchrun): set_device needs the index.
    device = resolve_device(
        device_name, local_rank=info.local_rank, distributed=info.distributed, field="device"
    )
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if info.distributed and not dist.is_initialized():
        stop_with_parent()  # a SIGKILLed torchrun left its ranks training to the end
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(
            backend=backend,
            rank=info.rank,
            world_size=info.world_size,
            device_id=device if device.type == "cuda" else None,
        )
    return device


def teardown(info: DistInfo) -> None:
    import torch.distributed as dist

    if info.distributed and dist.is_initialized():
        dist.destroy_process_group()


def wrap(model, info: DistInfo, device):
    """Wrap ``model`` in DistributedDataParallel when there are several processes."""
    if not info.distributed:
        return model
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    # Buffers (normalization stats) are identical on every rank and never change: no per-forward broadcast.
    params = inspect.signature(DistributedDataParallel).parameters
    no_sync = (
        {"forward_sync_buffers": False} if "forward_sync_buffers" in params else {"broadcast_buffers": False}
    )
    # find_unused_parameters=False: every trainable parameter gets a gradient each step (tested per policy).
    return DistributedDataParallel(model, device_ids=ids, **no_sync)


def unwrap(model):
    """The bare module under DDP / torch.compile wrappers."""
    while True:
        if hasattr(model, "module"):
            model = model.module
        elif hasattr(model, "_orig_mod"):
            model = model._orig_mod
        else:
            return model


def all_reduce_mean(values: dict[str, Any], info: DistInfo) -> dict[str, Any]:
    """Average a dict of same-device scalar tensors over ranks in one collective."""
    if not info.distributed or not values:
        return values
    import torch
    import torch.distributed as dist

    keys = sorted(values)
    flat = torch.stack([values[k].float() for k in keys])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    flat /= info.world_size
    return {k: flat[i] for i, k in enumerate(keys)}


def all_gather_object(obj: Any, info: DistInfo) -> list[Any]:
    """Every rank's ``obj`` (JSON-able or tensors), in rank order; ``[obj]`` in a single process."""
    if not info.distributed:
        return [obj]
    import torch.distributed as dist

    out: list[Any] = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj: Any, info: DistInfo) -> Any:
    """Rank 0's ``obj`` on every rank."""
    if not info.distributed:
        return obj
    import torch.distributed as dist

    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier(info: DistInfo) -> None:
    if info.distributed:
        import torch.distributed as dist

        dist.barrier()
