"""The sim's scripted expert as an evaluation source (a reference point for every success table).

The expert reads the simulator state, so it is bound to the env it acts in: it is given to the harness
as a picklable factory, and each worker process builds it around its own env.
"""

from __future__ import annotations

from typing import Any

from actlab.errors import ActlabError
from actlab.evaluation.peers import is_peer_task
from actlab.evaluation.sources import PolicySource
from actlab.sim import ExpertPolicy


def expert_factory(env: Any) -> Any:
    """``ExpertPolicy`` bound to ``env`` (module-level so that worker processes can unpickle it)."""
    return ExpertPolicy(env)


def expert_source(task: str = "so101_pick_place") -> PolicySource:
    """A PolicySource running the scripted expert of a sim task."""
    if is_peer_task(task):
        raise ActlabError(
            "the scripted expert exists only for actlab's own sim tasks",
            field="--expert",
            expected="--task so101_pick_place",
            found=task,
            fix="evaluate a checkpoint on the peer env instead",
        )
    return PolicySource(name="scripted_expert", factory=expert_factory)
