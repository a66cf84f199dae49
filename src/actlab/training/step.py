"""The training step: batch -> loss and metrics, backward, clip, optimizer, schedule. Nothing else.

No host syncs: the loss, the metric terms and the gradient norm stay 0-dim tensors on the device; the
loop reads them back only on logging steps. :class:`GraphedStep` captures the same step in a CUDA graph
(one launch instead of ~1,000 small kernels per step for ACT at small batch sizes).
"""

from __future__ import annotations

import contextlib
import copy
import math
from typing import Any


def autocast(device, amp_dtype):
    """bf16 autocast context on ``device`` (a no-op context when ``amp_dtype`` is None)."""
    import torch

    if amp_dtype is None:
        return contextlib.nullcontext()
    # cache_enabled=False: required inside CUDA-graph capture, harmless elsewhere
    return torch.autocast(device_type=device.type, dtype=amp_dtype, cache_enabled=False)


class WorkingWeights:
    """bf16 copies of the weights that autocast would cast to bf16 at every use, refreshed once per step.

    Under bf16 autocast every matmul and convolution casts its fp32 weight to bf16 in the forward and
    casts the bf16 weight gradient back in the backward: two small kernels per weight per step (481
    dtype-cast copies per step for ACT on an H100). Here the forward runs with bf16 working copies of
    exactly those weights (nn.Linear / nn.Conv2d weights and biases, attention in-projections) through
    ``torch.func.functional_call``; autocast finds them already in bf16 and casts nothing. The fp32
    parameters stay the module's own (optimizer, checkpoints, EMA and validation see them unchanged):
    one multi-tensor copy writes them into the working copies at the start of a step, one copies the
    bf16 gradients into their fp32 ``.grad``. The values are those autocast would have used (the same
    round-to-nearest cast), so the step computes what the autocast step computes.

    Not with DDP (its gradient hooks sit on the module's parameters) or torch.compile.
    """

    def __init__(self, model, dtype) -> None:
        import torch
        from torch import nn

        # lazy: layers imports torch; training modules import without it
        from actlab.policies.layers import Attention

        names = []
        for prefix, module in model.named_modules():
            if isinstance(module, (nn.Linear, nn.Conv2d)):
                own = ("weight", "bias")
            elif isinstance(module, Attention):
                own = ("in_proj_weight", "in_proj_bias")
            else:
                continue
            for n in own:
                if isinstance(getattr(module, n, None), nn.Parameter):
                    names.append(f"{prefix}.{n}" if prefix else n)
        params = dict(model.named_parameters())
        self.names = [n for n in names if params[n].dtype == torch.float32]
        self.masters = [params[n] for n in self.names]
        self.working = [p.detach().to(dtype).requires_grad_(p.requires_grad) for p in self.masters]
        self.trainable = [i for i, p in enumerate(self.masters) if p.requires_grad]
        # fp32 gradient buffers, allocated once: the same tensors every step (a CUDA graph keeps them)
        self.master_grads = [torch.zeros_like(self.masters[i]) for i in self.trainable]

    def refresh(self) -> None:
        """fp32 weights -> bf16 working copies (one multi-tensor copy)."""
        import torch

        with torch.no_grad():
            torch._foreach_copy_(self.working, [p.detach() for p in self.masters])

    def forward(self, model, batch):
        from torch.func import functional_call

        return functional_call(model, dict(zip(self.names, self.working)), (batch,), strict=False)

    def gradients_to_masters(self) -> None:
        """bf16 working gradients -> the fp32 parameters' ``.grad`` (one multi-tensor copy)."""
        import torch

        grads = []
        for i in self.trainable:
            g = self.working[i].grad
            grads.append(g if g is not None else torch.zeros_like(self.working[i]))
        with torch.no_grad():
            torch._foreach_copy_(self.master_grads, grads)
        for i, g in zip(self.trainable, self.master_grads):
            self.masters[i].grad = g
            self.working[i].grad = None


def forward_backward(model, batch: dict[str, Any], device, amp_dtype, weights=None) -> dict[str, Any]:
    """Loss and metric tensors for ``batch``, gradients accumulated into ``.grad``.

    ``weights`` (a WorkingWeights) runs the forward with its bf16 working copies.
    """
    if weights is not None:
        weights.refresh()
    with autocast(device, amp_dtype):
        loss, metrics = weights.forward(model, batch) if weights is not None else model(batch)
    loss.backward()
    if weights is not None:
        weights.gradients_to_masters()
    return {"loss": loss.detach(), **{k: v.detach() for k, v in metrics.items() if k != "loss"}}


def optimizer_step(params: list, optimizer, grad_clip: float):
    """Clip the global grad norm (``grad_clip`` 0 only measures it), step, clear gradients.

    Returns the pre-clip gradient norm as a 0-dim device tensor (no sync: error_if_nonfinite=False).
    """
    import torch

    max_norm = grad_clip if grad_clip > 0 else math.inf
    grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm, error_if_nonfinite=False, foreach=True)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return grad_norm.detach()


def train_step(
    model, batch, optimizer, scheduler, params, *, grad_clip, device, amp_dtype, timer=None, weights=None
):
    """One optimizer step on ``batch``; returns ``{"loss", <policy metrics>, "grad_norm"}`` as tensors.

    ``timer`` (a PhaseTimer) gets the marks ``fwd_bwd`` and ``optim``; ``weights``: see WorkingWeights.
    """
    out = forward_backward(model, batch, device, amp_dtype, weights)
    if timer is not None:
        timer.mark("fwd_bwd")
    out["grad_norm"] = optimizer_step(params, optimizer, grad_clip)
    scheduler.step()
    if timer is not None:
        timer.mark("optim")
    return out


class CaptureError(RuntimeError):
    """Capturing the step failed (not for lack of memory); the weights and optimizer state are as before."""


class GraphedStep:
    """The whole step (forward, backward, clip, AdamW) captured once in a CUDA graph and replayed.

    Requirements (checked by the caller): CUDA, one process, static shapes, a policy without host
    syncs, AdamW built with ``capturable=True`` and tensor learning rates (so LambdaLR's in-place
    updates reach the graph). Warmup iterations run on a side stream before capture as the CUDA-graph
    docs require; the model and optimizer state are restored afterwards, so capture does not train.
    """

    def __init__(
        self, model, optimizer, params, *, grad_clip: float, device, amp_dtype, warmup: int = 3, weights=None
    ):
        self.model = model
        self.weights = weights
        self.optimizer = optimizer
        self.params = params
        self.grad_clip = grad_clip
        self.device = device
        self.amp_dtype = amp_dtype
        self.warmup = warmup
        self.graph = None
        self.static_batch: dict[str, Any] | None = None
        self.static_out: dict[str, Any] | None = None

    def _body(self) -> dict[str, Any]:
        out = forward_backward(self.model, self.static_batch, self.device, self.amp_dtype, self.weights)
        out["grad_norm"] = optimizer_step(self.params, self.optimizer, self.grad_clip)
        return out

    def _capture(self, batch: dict[str, Any]) -> None:
        """Warm up, capture, and put the weights and optimizer state back as they were.

        Raises CaptureError (state restored) when the step cannot be captured; a CUDA out-of-memory
        error propagates unchanged (the batch is too large whether captured or not).
        """
        import torch

        saved_model = copy.deepcopy(self.model.state_dict())
        saved_optim = {
            p: {k: v.clone() for k, v in st.items() if torch.is_tensor(v)}
            for p, st in self.optimizer.state.items()
        }
        try:
            self.static_batch = {k: v.clone() for k, v in batch.items()}
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                for _ in range(self.warmup):
                    self._body()
            torch.cuda.current_stream(self.device).wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            self.optimizer.zero_grad(set_to_none=True)  # grads get allocated from the graph's pool
            with torch.cuda.graph(self.graph):
                self.static_out = self._body()
        except torch.cuda.OutOfMemoryError:
            self._restore(saved_model, saved_optim)
            raise
        except Exception as e:  # a host sync, a CPU tensor, an unsupported op ... inside the step
            self._restore(saved_model, saved_optim)
            first_line = (str(e).strip().splitlines() or [""])[0]
            raise CaptureError(f"{type(e).__name__}: {first_line}") from e
        # The warmup and the capture ran real updates: put weights and AdamW moments back, in place,
        # because the graph holds the addresses of these very tensors.
        self._restore(saved_model, saved_optim, keep_graph=True)

    def _restore(self, saved_model, saved_optim, keep_graph: bool = False) -> None:
        import torch

        if not keep_graph:
            # a failed warmup may still be running on the side stream: finish it before writing back
            with contextlib.suppress(Exception):  # (no CUDA at all: nothing is running)
                torch.cuda.synchronize(self.device)
            self.graph, self.static_batch, self.static_out = None, None, None
            self.optimizer.zero_grad(set_to_none=True)
        with torch.no_grad():
            self.model.load_state_dict(saved_model)
            for p, st in self.optimizer.state.items():
                for k, v in st.items():
                    if torch.is_tensor(v):
                        v.copy_(saved_optim[p][k]) if p in saved_optim and k in saved_optim[p] else v.zero_()

    def __call__(self, batch, scheduler, timer=None) -> dict[str, Any]:
        if self.graph is None:
            self._capture(batch)
        for k, v in batch.items():
            self.static_batch[k].copy_(v, non_blocking=True)
        self.graph.replay()
        if timer is not None:
            timer.mark("fwd_bwd")  # forward, backward and optimizer are one launch here
        scheduler.step()
        if timer is not None:
            timer.mark("optim")
        return {k: v.clone() for k, v in self.static_out.items()}
