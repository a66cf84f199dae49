import json

import pytest
import torch

from actlab.errors import ActlabError
from actlab.training import get_preset
from actlab.training.checkpoint import CheckpointManager


@pytest.fixture(scope="module")
def policy(tiny_dataset):
    from actlab.datasets import compute_stats, open_dataset
    from actlab.policies import make_policy

    cfg = get_preset("tiny").policy
    ds = open_dataset(tiny_dataset)
    return make_policy(cfg, ds.features, compute_stats(ds, **cfg.stats_request()))


def _save(mgr, policy, step, val, rng=None):
    opt = {
        "state": {0: {"exp_avg": torch.full((3,), float(step))}},
        "param_groups": [{"lr": 0.1, "params": [0]}],
    }
    return mgr.save(step, policy, opt, {"last_epoch": step}, {"world_size": 1, "ranks": [{"step": step}]},
                    [rng if rng is not None else {"torch_cpu": torch.get_rng_state()}], val)  # fmt: skip


def test_keep_last_k_plus_best_and_pointers(policy, tmp_path):
    mgr = CheckpointManager(tmp_path, keep_last=2, keep_best=True)
    for step, val in zip(range(1, 6), [3.0, 1.0, 2.0, 4.0, 5.0]):
        _save(mgr, policy, step, val)
    assert mgr.steps() == [2, 4, 5]  # newest two + the best
    assert json.loads((mgr.root / "last.json").read_text())["step"] == 5
    assert json.loads((mgr.root / "best.json").read_text()) == {
        "step": 2,
        "path": "step_0000002",
        "val_loss": 1.0,
    }
    state = mgr.load(4, rank=0)
    assert state.step == 4 and state.meta["ranks"][0]["step"] == 4 and state.scheduler == {"last_epoch": 4}
    assert torch.equal(state.optimizer["state"][0]["exp_avg"], torch.full((3,), 4.0))
    assert torch.equal(state.rng["torch_cpu"], torch.get_rng_state())
    # each checkpoint directory is a policy bundle that evaluation loads on its own
    from actlab.policies import load_policy

    loaded = load_policy(mgr.path(2))
    for k, v in policy.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v)


def test_a_failed_write_leaves_the_previous_checkpoints_untouched(policy, tmp_path):
    mgr = CheckpointManager(tmp_path, keep_last=2, keep_best=False)
    _save(mgr, policy, 1, None)
    with pytest.raises(Exception):  # noqa: B017  (any error inside the write)
        _save(mgr, policy, 2, None, rng={"not_saveable": lambda: None})
    assert mgr.steps() == [1]
    assert sorted(p.name for p in mgr.root.iterdir()) == ["last.json", "step_0000001"]  # no temp dir left
    assert json.loads((mgr.root / "last.json").read_text())["step"] == 1
    assert not (mgr.root / "best.json").exists()


def test_resume_bookkeeping(policy, tmp_path):
    mgr = CheckpointManager(tmp_path, keep_last=5, keep_best=True)
    for step in (1, 2, 3):
        _save(mgr, policy, step, float(10 - step))
    # a kill between the rename and the pointer update: the newer complete directory still counts
    (mgr.root / "last.json").write_text(json.dumps({"step": 2, "path": "step_0000002", "val_loss": 8.0}))
    assert mgr.last_step() == 3
    # resuming from step 1 forgets what the killed run wrote after it, best pointer included
    mgr.truncate_after(1)
    assert mgr.steps() == [1] and not (mgr.root / "best.json").exists()
    (mgr.path(1) / "training_state" / "rng_rank0.pt").unlink()
    with pytest.raises(ActlabError, match="checkpoint is incomplete"):
        mgr.load(1, rank=0)
    # partial temporary directories from a kill mid-write are cleaned up
    (mgr.root / ".step_0000004.123.tmp").mkdir()
    mgr.clean_partial()
    assert not (mgr.root / ".step_0000004.123.tmp").exists()


def test_resume_finishes_the_pointer_updates_a_kill_cut_short(policy, tmp_path, monkeypatch):
    mgr = CheckpointManager(tmp_path, keep_last=2, keep_best=True)
    for step, val in ((1, 3.0), (2, 2.0), (3, 2.5)):
        _save(mgr, policy, step, val)
    assert mgr.steps() == [2, 3]
    # step 4 (the best so far) is renamed into place, then the process dies before the pointers and pruning
    with monkeypatch.context() as m:
        m.setattr(mgr, "_update_pointers", lambda *a: None)
        m.setattr(mgr, "prune", lambda: None)
        _save(mgr, policy, 4, 1.0)
    assert json.loads((mgr.root / "last.json").read_text())["step"] == 3
    assert mgr.last_step() == 4 and mgr.steps() == [2, 3, 4]
    mgr.repair_pointers(mgr.last_step())  # what a resume does first
    assert json.loads((mgr.root / "last.json").read_text()) == {"step": 4, "path": "step_0000004",
                                                                "val_loss": 1.0}  # fmt: skip
    assert json.loads((mgr.root / "best.json").read_text())["step"] == 4
    assert mgr.steps() == [3, 4]  # retention ran: step 2 is neither among the newest two nor the best


def test_a_best_pointer_never_names_a_deleted_checkpoint(policy, tmp_path):
    mgr = CheckpointManager(tmp_path, keep_last=2, keep_best=True)
    for step, val in ((1, 1.0), (2, 2.0), (3, 3.0)):
        _save(mgr, policy, step, val)
    assert mgr.steps() == [1, 2, 3]  # newest two + the best
    # resumed with checkpoint.keep_best=false (an allowed change): the old best is pruned, and its pointer too
    mgr = CheckpointManager(tmp_path, keep_last=2, keep_best=False)
    _save(mgr, policy, 4, 0.5)
    assert mgr.steps() == [3, 4]
    assert not (mgr.root / "best.json").exists()
    assert not [p for p in mgr.root.iterdir() if p.name.startswith(".")]  # no trash left behind
