"""Torch's intra-op thread count for one block of code, restored afterwards."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run a block with ``n`` torch intra-op threads (unchanged for None), restoring the count after."""
    if n is None:
        yield
        return
    import torch  # lazy: utils imports without torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
