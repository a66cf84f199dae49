import math

import pytest

from actlab.training.config import ScheduleConfig
from actlab.training.schedule import build_scheduler, lr_factor


def test_warmup_then_cosine_reaches_floor_at_last_step():
    cfg = ScheduleConfig(kind="cosine", warmup_steps=4, min_lr_ratio=0.1)
    f = [lr_factor(s, 20, cfg) for s in range(20)]
    assert f[:4] == pytest.approx([0.2, 0.4, 0.6, 0.8])  # the first step already moves the weights
    assert f[4] == pytest.approx(1.0)
    assert f[-1] == pytest.approx(0.1)
    decay = f[4:]
    assert all(decay[i] >= decay[i + 1] for i in range(len(decay) - 1))  # monotone after warmup
    assert lr_factor(12, 20, cfg) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 8 / 15)))


def test_constant_schedule_holds_peak():
    cfg = ScheduleConfig(kind="constant", warmup_steps=2)
    assert [lr_factor(s, 10, cfg) for s in range(5)] == pytest.approx([1 / 3, 2 / 3, 1, 1, 1])


def test_torch_scheduler_applies_factor_to_each_group():
    import torch

    p1, p2 = torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([{"params": [p1], "lr": 1e-3}, {"params": [p2], "lr": 1e-5}])
    cfg = ScheduleConfig(kind="cosine", warmup_steps=0)
    sched = build_scheduler(opt, 11, cfg)
    for _ in range(5):
        opt.step()
        sched.step()
    expected = 0.5 * (1 + math.cos(math.pi * 5 / 10))
    assert opt.param_groups[0]["lr"] == pytest.approx(1e-3 * expected)
    assert opt.param_groups[1]["lr"] == pytest.approx(1e-5 * expected)


def test_sync_lr_applies_the_current_schedule_after_a_resume_that_changed_the_length():
    import torch

    from actlab.training.schedule import sync_lr

    cfg = ScheduleConfig(kind="cosine", warmup_steps=2, min_lr_ratio=0.0)

    def make(total):
        p = torch.nn.Parameter(torch.zeros(1))
        opt = torch.optim.AdamW([{"params": [p], "lr": 1e-3}])
        return opt, build_scheduler(opt, total, cfg)

    opt, sched = make(8)
    for _ in range(6):
        opt.step()
        sched.step()
    saved_lr = opt.param_groups[0]["lr"]
    # same length: loading then syncing gives bitwise the rate the run would have used
    opt2, sched2 = make(8)
    opt2.load_state_dict(opt.state_dict())
    sched2.load_state_dict(sched.state_dict())
    sync_lr(sched2)
    assert opt2.param_groups[0]["lr"] == saved_lr
    # longer run: the next step already uses the stretched cosine, not the old schedule's nearly-0 rate
    opt3, sched3 = make(16)
    opt3.load_state_dict(opt.state_dict())
    sched3.load_state_dict(sched.state_dict())
    assert opt3.param_groups[0]["lr"] == saved_lr  # what the optimizer state alone would use
    sync_lr(sched3)
    assert opt3.param_groups[0]["lr"] == pytest.approx(1e-3 * lr_factor(6, 16, cfg))
    assert opt3.param_groups[0]["lr"] > 5 * saved_lr
