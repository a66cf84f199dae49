"""Device selection, passed explicitly everywhere (no hidden global device).

Every command resolves its device through :func:`resolve_device`, so each spelling means the same thing
everywhere: ``auto`` (CUDA, then MPS, then CPU), ``cpu``, ``mps``, ``cuda`` and ``cuda:N``. A CUDA device is
always returned *with its index*: ``torch.cuda.set_device(torch.device("cuda"))`` raises "Expected a
torch.device with a specified index", and CUDA streams, RNG state and memory statistics all want one
device, not "the current one". Without an explicit index the index is torchrun's ``LOCAL_RANK`` (0 in a
plain launch); in a multi-process (DDP) job every CUDA spelling means ``cuda:LOCAL_RANK``, one GPU per
process.

The decision is :func:`device_name_for`, a pure function of the name, the local rank and what the machine
has, so it is tested on machines without a GPU.
"""

from __future__ import annotations

import os

from actlab.errors import ActlabError

# What a user may write (for error messages).
SPELLINGS = "auto, cpu, cuda, cuda:N or mps"


def _cuda_index(name: str, field: str) -> int | None:
    """``cuda`` -> None, ``cuda:N`` -> N; anything else that starts with cuda is an error."""
    if name == "cuda":
        return None
    text = name[len("cuda:") :]
    if not name.startswith("cuda:") or not text.isdigit():
        raise ActlabError("unknown device", field=field, expected=SPELLINGS, found=name)
    return int(text)


def device_name_for(
    name: str,
    *,
    cuda_count: int,
    mps_available: bool = False,
    local_rank: int | None = None,
    distributed: bool = False,
    field: str = "device",
    other_available: bool = False,
) -> str:
    """The device ``name`` stands for on a machine with ``cuda_count`` usable CUDA devices.

    Returns ``"cpu"``, ``"mps"``, ``"cuda:N"`` (always indexed) or another torch device string unchanged
    when ``other_available`` says its backend is usable here (``torch.xpu.is_available()``, ...). The
    ``meta`` device is refused: its tensors have shapes and no data, so no policy runs there and no time
    can be measured (``eval --latency measured --device meta`` ended in a traceback).
    ``local_rank`` (torchrun's ``LOCAL_RANK``) picks the GPU when ``name`` has no index; with
    ``distributed`` it picks it for every CUDA spelling (each process trains on its own GPU).
    Raises ActlabError for an unknown spelling, CUDA on a machine without it, or an index that is not there.
    """
    name = str(name).strip().lower()
    if name == "auto":
        if cuda_count > 0:
            name = "cuda"
        else:
            return "mps" if mps_available else "cpu"
    if name.split(":")[0] == "meta":
        raise ActlabError(
            "the meta device holds no data: nothing can be computed or timed on it",
            field=field,
            expected=SPELLINGS,
            found=name,
            fix="use device cpu, cuda or auto (nothing was run)",
        )
    if name not in ("cpu", "mps") and not name.startswith("cuda") and not other_available:
        raise ActlabError(
            "unknown device, or one this torch cannot use",
            field=field,
            expected=SPELLINGS,
            found=name,
            fix="use device cpu, cuda or auto (nothing was run)",
        )
    if name in ("cpu", "mps") or not name.startswith("cuda"):
        if name == "mps" and not mps_available:
            raise ActlabError(
                "MPS was requested but torch sees no MPS device",
                field=field,
                found=name,
                fix="use device cpu or auto",
            )
        return name
    index = _cuda_index(name, field)
    if cuda_count <= 0:
        raise ActlabError(
            "CUDA was requested but torch sees no CUDA device",
            field=field,
            found=name,
            fix="use device cpu or auto, or install a CUDA build of torch",
        )
    if distributed or index is None:
        chosen = local_rank if local_rank is not None else 0
        why = f"LOCAL_RANK={local_rank}" if local_rank is not None else "the first GPU"
    else:
        chosen, why = index, name
    if not 0 <= chosen < cuda_count:
        raise ActlabError(
            f"CUDA device {chosen} ({why}) does not exist",
            field=field,
            expected=f"an index below {cuda_count} (torch sees {cuda_count} CUDA device(s))",
            found=name,
            fix=f"use cuda:0 .. cuda:{cuda_count - 1}, or start fewer processes per node",
        )
    return f"cuda:{chosen}"


def env_local_rank(env: dict[str, str] | None = None) -> int | None:
    """torchrun's ``LOCAL_RANK`` as an int, or None in a plain launch (or when it is not a number)."""
    value = (os.environ if env is None else env).get("LOCAL_RANK")
    return int(value) if value is not None and value.strip().isdigit() else None


def resolve_device(
    name: str = "auto",
    *,
    local_rank: int | None = None,
    distributed: bool = False,
    field: str = "--device",
):
    """``torch.device`` for ``name`` (see :func:`device_name_for`); a CUDA device always has an index.

    ``local_rank`` None reads ``LOCAL_RANK`` from the environment (set by torchrun).
    """
    import torch

    if isinstance(name, torch.device):
        name = str(name)
    cuda_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    mps = getattr(torch.backends, "mps", None)
    backend = getattr(torch, str(name).strip().lower().split(":")[0], None)  # torch.xpu, torch.mtia, ...
    usable = getattr(backend, "is_available", None)
    chosen = device_name_for(
        name,
        cuda_count=cuda_count,
        mps_available=bool(mps is not None and mps.is_available()),
        local_rank=env_local_rank() if local_rank is None else local_rank,
        distributed=distributed,
        field=field,
        other_available=bool(callable(usable) and usable()),
    )
    try:
        return torch.device(chosen)
    except RuntimeError as e:
        raise ActlabError("unknown device", field=field, expected=SPELLINGS, found=name) from e
