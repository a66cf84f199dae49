"""The policy contract in code: what the trainer, evaluation and any bridged policy may rely on.

Three nested ``typing.Protocol`` classes, narrowest first, and one for configs:

- :class:`RolloutPolicy`: ``reset()`` and ``select_action(obs)``; all a rollout calls (evaluation runs
  scripted experts and other plain objects through it too).
- :class:`InferencePolicy`: adds ``predict_action_chunk(obs) -> (B, H, A)``. What a policy that only acts
  implements (a LeRobot policy bridged from another process) and what whiskers and a policy check read.
- :class:`TrainablePolicy`: adds everything ``actlab.training`` and the bundle writer call: the loss,
  the keys and offsets to fetch, optimizer groups, frozen-backbone features, the stats to save, and the
  ``torch.nn.Module`` members the trainer uses. Every registered policy type satisfies it (a test builds
  each and checks members and signatures with :func:`contract_problems`).
- :class:`PolicyConfig`: what the trainer reads from ``TrainConfig.policy`` before a policy exists.

The protocols are structural: nothing has to subclass them, and ``isinstance`` checks (they are
``runtime_checkable``) only test that the members exist; :func:`contract_problems` also compares method
signatures. No torch import here (configs and the CLI's help stay light).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np
    import torch

# Batch / observation key suffix of cached backbone features: with ``freeze_backbone``,
# ``batch[camera + FEATURES_SUFFIX]`` ((B, [1,] C', h, w), from ``encode_images``) may replace
# ``batch[camera]``. The one spelling of it: policies read it, the trainer writes it.
FEATURES_SUFFIX = ".features"
# Batch key of ``observation.state`` at the offsets a policy asks for under this name in its
# ``delta_indices`` (a training input only, never an observation): a policy with a correction head reads
# the state at every step of its chunk. The trainer gathers it from the ``observation.state`` column.
FUTURE_STATE = "observation.state.future"
# Batch key of the frozen policy's own chunks planned at the frames before a sample's
# (``policy.correction_only``): ``(B, H, H, A)``, row ``j`` the chunk planned ``H - 1 - j`` frames earlier,
# absolute actions. The trainer computes every frame's chunk once (the policy is frozen) and gathers them
# at the offsets the policy asks for under this name; a training input only, never an observation.
PAST_CHUNKS = "action.past_chunks"


@runtime_checkable
class PolicyConfig(Protocol):
    """A policy's config (a frozen dataclass, e.g. ``ACTConfig``): what the trainer reads before it
    builds the policy. ``type`` is the registry name, written to a bundle's ``config.json``."""

    # registry name of the policy type (actlab.policies.registry)
    type: str
    # camera keys the policy uses; empty: every camera of the dataset
    cameras: tuple[str, ...]
    # number of actions predicted per query (H of the (B, H, A) chunks)
    chunk_size: int
    # no backbone gradients: the trainer then caches backbone features once per stored frame
    freeze_backbone: bool

    def camera_keys(self, features: dict[str, Any]) -> list[str]:
        """The cameras used, in a fixed order, checked against the dataset ``features``."""
        ...

    def delta_indices(self, camera_keys: list[str]) -> dict[str, list[int]]:
        """Every key the sampler must fetch with its frame offsets (0 = the current frame)."""
        ...

    def stats_request(self) -> dict[str, Any]:
        """Keyword arguments for ``actlab.datasets.compute_stats`` (the stats the policy normalizes with)."""
        ...


@runtime_checkable
class RolloutPolicy(Protocol):
    """What a rollout calls: ``reset()`` before every episode, then ``select_action`` once per step."""

    def reset(self) -> None:
        """Forget the previous episode (action queue, past states): called before every episode."""
        ...

    def select_action(self, obs: dict[str, torch.Tensor]) -> torch.Tensor | np.ndarray:
        """The next action (B, A) for a batch of observations (images uint8 (B, C, H, W), state (B, D))."""
        ...


@runtime_checkable
class InferencePolicy(RolloutPolicy, Protocol):
    """A policy that predicts action chunks: the contract of anything evaluated as a policy (a LeRobot
    policy bridged from its own process implements exactly this)."""

    def predict_action_chunk(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Absolute, unnormalized actions (B, H, A) for a batch of observations; no effect on the state
        ``select_action`` keeps."""
        ...


@runtime_checkable
class TrainablePolicy(InferencePolicy, Protocol):
    """What ``actlab.training`` (build, step, checkpoints) and ``save_policy`` call on a policy.

    Besides its own members the trainer uses those of ``torch.nn.Module`` listed at the end (a trainable
    policy is an ``nn.Module``); they are part of the contract so that it is complete.
    """

    # the config the policy was built from (saved as the bundle's config.json)
    config: PolicyConfig
    # the dataset features the policy was built from (saved as the bundle's features.json)
    features: dict[str, Any]
    # the cameras the policy reads, in order (config.camera_keys(features))
    camera_keys: list[str]

    @property
    def delta_indices(self) -> dict[str, list[int]]:
        """Every key the sampler must fetch with its frame offsets (only frames the policy reads)."""
        ...

    @property
    def observation_delta_indices(self) -> dict[str, list[int]]:
        """``delta_indices`` without ``action``: the observation keys."""
        ...

    @property
    def action_delta_indices(self) -> list[int]:
        """The action offsets of a training target (``range(chunk_size)``)."""
        ...

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """(loss, metrics) of a training batch: a 0-dim loss and 0-dim detached metric tensors (no host
        sync). Train mode trains; eval mode gives the validation loss (inference semantics)."""
        ...

    def param_groups(self, lr: float, backbone_lr: float, weight_decay: float) -> list[dict[str, Any]]:
        """Optimizer parameter groups, each with ``name``, ``params``, ``lr`` and ``weight_decay``; frozen
        parameters left out (a policy never builds its optimizer)."""
        ...

    def encode_images(self, camera_key: str, images: torch.Tensor) -> torch.Tensor:
        """Backbone features (N, C', h, w) of one camera's frames (N, 3, H, W): what the trainer caches
        as ``<camera>`` + FEATURES_SUFFIX with a frozen backbone."""
        ...

    def stats_for_bundle(self) -> dict[str, Any]:
        """The normalization stats the policy was built from (the keys it reads), for stats.json."""
        ...

    def use_cuda_graphs(self, mode: bool | str = "auto") -> str | None:
        """Replay inference from CUDA graphs (``"auto"``: on CUDA); returns why it is off, else None."""
        ...

    # ---- torch.nn.Module members the trainer and the bundle code use
    # train mode (dropout, CVAE encoder) or eval mode
    training: bool

    def __call__(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``forward`` through the module's hooks."""
        ...

    def train(self, mode: bool = True) -> Any: ...

    def eval(self) -> Any: ...

    def to(self, *args: Any, **kwargs: Any) -> Any: ...

    def parameters(self) -> Iterator[torch.nn.Parameter]: ...

    def named_parameters(self) -> Iterator[tuple[str, torch.nn.Parameter]]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> Any: ...


# ---------------------------------------------------------------------------------------------- checks
def contract_problems(obj: object, protocol: type) -> list[str]:
    """What keeps ``obj`` from satisfying ``protocol``; empty when it does.

    Stricter than ``isinstance(obj, protocol)``, which only tests that the members exist: a method must
    accept every call the protocol allows (same parameter names in the same positions, a default
    wherever the protocol has one, no extra parameter without a default), and a property must not be
    implemented as a method or the reverse. Return types are not checked (run the policy for that).
    """
    problems = []
    for name, want in _protocol_members(protocol).items():
        try:
            have = inspect.getattr_static(obj, name)
        except AttributeError:
            problems.append(f"{type(obj).__name__} has no {name!r}")
            continue
        if isinstance(want, property):
            if _is_method(have):
                problems.append(f"{name!r} must be a property or an attribute, not a method")
        elif want is not None:  # a method
            if not callable(getattr(obj, name)):
                problems.append(f"{name!r} must be a method")
                continue
            problems += [f"{name}(): {p}" for p in _signature_problems(want, getattr(obj, name))]
    return problems


def _protocol_members(protocol: type) -> dict[str, Any]:
    """``{name: function | property | None (a data attribute)}`` of a protocol and its protocol bases."""
    members: dict[str, Any] = {}
    for cls in reversed(protocol.__mro__):
        if not getattr(cls, "_is_protocol", False) or cls is Protocol:
            continue
        for name in getattr(cls, "__annotations__", {}):
            members[name] = None
        for name, value in vars(cls).items():
            if isinstance(value, property) or (
                inspect.isfunction(value) and (not name.startswith("__") or name == "__call__")
            ):
                members[name] = value
    return members


def _is_method(value: Any) -> bool:
    return inspect.isfunction(value) or isinstance(value, (staticmethod, classmethod))


def _signature_problems(want: Any, have: Any) -> list[str]:
    """Why ``have`` (bound) cannot be called as the protocol's ``want`` (unbound, with self) is."""
    try:
        impl = inspect.signature(have)
    except (TypeError, ValueError):
        return []  # a builtin without a signature: nothing to compare
    wanted = list(inspect.signature(want).parameters.values())[1:]  # without self
    params = impl.parameters
    kinds = {p.kind for p in params.values()}
    var_pos = inspect.Parameter.VAR_POSITIONAL in kinds
    var_kw = inspect.Parameter.VAR_KEYWORD in kinds
    positional = [
        p.name
        for p in params.values()
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    out = []
    for i, p in enumerate(wanted):
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            if p.kind not in kinds:
                out.append(f"takes no {'*' if p.kind == p.VAR_POSITIONAL else '**'}{p.name}")
            continue
        q = params.get(p.name)
        if q is None or q.kind in (q.VAR_POSITIONAL, q.VAR_KEYWORD):
            if not (var_pos and var_kw):
                out.append(f"has no parameter {p.name!r}")
            continue
        if p.kind == p.POSITIONAL_OR_KEYWORD and (
            q.kind != q.POSITIONAL_OR_KEYWORD or positional.index(p.name) != i
        ):
            out.append(f"parameter {p.name!r} must be positional-or-keyword at position {i}")
        elif p.kind == p.KEYWORD_ONLY and q.kind not in (q.KEYWORD_ONLY, q.POSITIONAL_OR_KEYWORD):
            out.append(f"parameter {p.name!r} must be accepted by keyword")
        if p.default is not p.empty and q.default is q.empty:
            out.append(f"parameter {p.name!r} needs a default (callers may leave it out)")
    names = {p.name for p in wanted}
    for q in params.values():
        if q.name not in names and q.default is q.empty and q.kind not in (q.VAR_POSITIONAL, q.VAR_KEYWORD):
            out.append(f"extra parameter {q.name!r} needs a default (callers of the contract never pass it)")
    return out
