"""DDP with two CPU processes (gloo) under torchrun: disjoint samples, replicas in sync, rank 0 writes."""

import json
import sys
from pathlib import Path

import pytest

import procs
from actlab.lifecycle.metrics_log import read_metrics


# Slow (14-15 s: two torchrun processes, gloo): run with -m slow; the sampler's disjoint shards per rank
# are tested without processes in tests/datasets/test_sampler.py.
@pytest.mark.slow
def test_two_cpu_processes_sample_disjoint_shares_and_stay_in_sync(tiny_dataset, tmp_path):
    from actlab.datasets import FrameStore, open_dataset

    FrameStore.build(open_dataset(tiny_dataset), image_size=32, progress=False)
    worker = Path(__file__).with_name("ddp_worker.py")
    # --standalone: torchrun picks a free port for the rendezvous on this machine
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone",
           str(worker), str(tiny_dataset), str(tmp_path)]  # fmt: skip
    # torchrun starts each worker in a session of its own: on a timeout `run` kills them too (a worker
    # left alone would block in a collective until gloo's 30-minute timeout).
    proc = procs.run(cmd, env={**procs.torchrun_env(tmp_path), "OMP_NUM_THREADS": "1"}, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["world_size"] == 2

    rank0, rank1 = result["seen"]
    for b0, b1 in zip(rank0, rank1):
        assert len(b0) == len(b1) == 4
        assert not set(b0) & set(b1)  # each step, the ranks draw different frames
    # over the epoch the shares are disjoint too (2 train episodes x 40 frames, 12 drawn per rank)
    assert not {i for b in rank0 for i in b} & {i for b in rank1 for i in b}
    assert result["max_init_diff"] == 0.0  # identical initial weights
    assert result["max_update"] > 0.0  # the steps changed them
    assert result["max_param_diff"] == 0.0  # and the all-reduced gradients kept the replicas equal

    run = tmp_path / "run"
    rows = read_metrics(run)
    steps = [r["step"] for r in rows if "loss" in r]
    assert steps == [1, 2, 3, 4]  # one writer: every step logged once
    assert all(r["samples_per_s"] > 0 for r in rows if "loss" in r)
    ckpts = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert ckpts == ["best.json", "last.json", "step_0000004"]
    state = json.loads((run / "checkpoints/step_0000004/training_state/state.json").read_text())
    assert state["world_size"] == 2 and len(state["ranks"]) == 2
    assert state["ranks"][0]["sampler"]["rank"] == 0 and state["ranks"][1]["sampler"]["rank"] == 1
    assert (run / "checkpoints/step_0000004/training_state/rng_rank1.pt").is_file()
    assert result["summary"]["step"] == 4
