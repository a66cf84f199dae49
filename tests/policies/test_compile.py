"""torch.compile of the training step (forward + backward + optimizer step) for both policies on CPU.

The default run traces with ``backend="aot_eager"`` and ``fullgraph=True``: dynamo must capture the whole
forward as one graph (a host sync such as ``.item()`` or data-dependent control flow would break it) and
AOTAutograd must trace its backward. The inductor variant (real code generation, minutes on 2 busy
cores) is marked slow.
"""

import pytest
import torch

from actlab.policies import make_policy
from conftest import make_batch, make_features, make_stats, tiny_act, tiny_relative

CASES = {
    "act": lambda: tiny_act(n_encoder_layers=1, dropout=0.1, freeze_backbone=False),
    "act_relative": lambda: tiny_relative(n_encoder_layers=1, dropout=0.1),
}


def compiled_training_steps(type_name: str, backend: str) -> None:
    cfg = CASES[type_name]()
    torch.manual_seed(0)
    policy = make_policy(cfg, make_features(), make_stats(horizon=cfg.chunk_size))
    policy.train()
    opt = torch.optim.AdamW(policy.param_groups(1e-3, 1e-4, 1e-4))
    step = torch.compile(policy, fullgraph=True, backend=backend)
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    for i in range(2):
        batch = make_batch(policy, batch_size=4, seed=i)
        loss, metrics = step(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        assert torch.isfinite(loss) and all(torch.isfinite(v) for v in metrics.values())
    assert all(not torch.equal(before[n], p) for n, p in policy.named_parameters())
    # Eval mode (deterministic) matches eager within float tolerance.
    policy.eval()
    batch = make_batch(policy, batch_size=4, seed=5)
    eager, _ = policy(batch)
    compiled, _ = step(batch)
    torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-5)


# act_relative slow (9-11 s of inductor compile): the same graph plus a prefix; act stays by default.
@pytest.mark.parametrize(
    "type_name", [pytest.param(t, marks=[pytest.mark.slow] if t != "act" else []) for t in CASES]
)
def test_training_step_compiles_as_one_graph(type_name):
    compiled_training_steps(type_name, "aot_eager")


@pytest.mark.slow
@pytest.mark.parametrize("type_name", list(CASES))
def test_training_step_compiles_with_inductor(type_name):
    compiled_training_steps(type_name, "inductor")
