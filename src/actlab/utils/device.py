"""Device selection, passed explicitly everywhere (STYLE.md §8: no hidden global device)."""

from __future__ import annotations


def resolve_device(name: str = "auto"):
    """``auto`` -> cuda if available, else mps, else cpu; anything else is passed to ``torch.device``."""
    import torch

    from actlab.errors import ActlabError

    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        dev = torch.device(name)
    except RuntimeError as e:
        raise ActlabError(
            "unknown device", field="--device", expected="auto, cpu, cuda, cuda:N or mps", found=name
        ) from e
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ActlabError(
            "CUDA was requested but torch sees no CUDA device",
            field="--device",
            found=name,
            fix="use --device cpu or auto, or install a CUDA build of torch",
        )
    return dev
