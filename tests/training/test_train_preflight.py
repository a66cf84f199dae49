import pytest

from actlab.errors import ActlabError
from actlab.training import preflight
from actlab.utils.disk import free_bytes


def test_plan_counts_weights_optimizer_and_alive_checkpoints():
    p = preflight.plan(n_params=1000, n_trainable=800, keep_last=3, keep_best=True)
    assert p.checkpoint_bytes == 1000 * 4 + 800 * 8 + preflight.CHECKPOINT_OVERHEAD_BYTES
    assert p.checkpoints_alive == 5  # 3 kept + best + the one being written
    assert p.need_bytes == 5 * p.checkpoint_bytes + preflight.RUN_DIR_OVERHEAD_BYTES


def test_check_refuses_under_a_limit_and_passes_with_room(tmp_path):
    p = preflight.plan(
        n_params=10_000_000, n_trainable=10_000_000, keep_last=2, keep_best=False, framestore_bytes=5_000_000
    )
    with pytest.raises(ActlabError, match="not enough disk space") as e:
        preflight.check(p, tmp_path / "run", limit_bytes=100 << 20)
    msg = str(e.value)
    assert "3 checkpoints alive" in msg and "FrameStore" in msg and "keep_last" in msg
    assert preflight.check(p, tmp_path / "run", limit_bytes=1 << 40) <= free_bytes(tmp_path)


def test_existing_checkpoints_count_against_the_budget():
    fresh = preflight.plan(100, 100, keep_last=2, keep_best=False)
    resumed = preflight.plan(
        100, 100, keep_last=2, keep_best=False, existing_checkpoint_bytes=2 * fresh.checkpoint_bytes
    )
    assert resumed.need_bytes == fresh.need_bytes - 2 * fresh.checkpoint_bytes
