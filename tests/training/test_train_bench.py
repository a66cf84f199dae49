import json
import os
import subprocess
import sys


def test_bench_train_reports_model_only_full_and_stall_in_one_run(tiny_dataset):
    # frames_on_device=true: the whole FrameStore is copied into the training device's memory (RAM here)
    cmd = [sys.executable, "-m", "actlab.cli", "bench", "train", "--preset", "tiny",
           "--dataset", str(tiny_dataset), "--steps", "2", "--rounds", "2",
           "--set", "data.frames_on_device=true", "--json"]  # fmt: skip
    r = subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["benchmark"] == "train" and result["device"] == "cpu"
    assert result["config"]["frames_on_device"] is True and result["config"]["preset"] == "tiny"
    m = result["metrics"]
    assert m["model_only_step_ms"] > 0 and m["full_step_ms"] > 0
    assert m["data_stall_frac"] < 1.0
    assert abs(result["ratios"]["full_vs_model_only"] - m["full_step_ms"] / m["model_only_step_ms"]) < 1e-9
    assert abs(m["samples_per_s_full"] - 8 * 1000 / m["full_step_ms"]) < 1e-6
