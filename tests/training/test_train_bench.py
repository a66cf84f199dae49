import json

import pytest

from actlab.cli import main

# one torch thread in every test here (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_bench_train_reports_model_only_full_and_stall_in_one_run(tiny_dataset, capsys):
    # frames_on_device=true: the whole FrameStore is copied into the training device's memory (RAM here)
    args = ["bench", "train", "--preset", "tiny", "--dataset", str(tiny_dataset), "--steps", "2", "--rounds",
            "2", "--set", "data.frames_on_device=true", "--json"]  # fmt: skip
    # In this process: a process of its own adds only its start (~7 s of imports on 2 cores).
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["benchmark"] == "train" and result["device"] == "cpu"
    assert result["config"]["frames_on_device"] is True and result["config"]["preset"] == "tiny"
    m = result["metrics"]
    assert m["model_only_step_ms"] > 0 and m["full_step_ms"] > 0
    assert m["data_stall_frac"] < 1.0
    assert abs(result["ratios"]["full_vs_model_only"] - m["full_step_ms"] / m["model_only_step_ms"]) < 1e-9
    assert abs(m["samples_per_s_full"] - 8 * 1000 / m["full_step_ms"]) < 1e-6
    # model FLOPs: counted once on the real policy and batch, turned into FLOP/s for both step times
    from actlab.training import get_preset

    flops = _tiny_step_flops(tiny_dataset)
    assert m["gflops_per_step"] == flops / 1e9
    assert abs(m["achieved_tflops_model_only"] - flops / (m["model_only_step_ms"] / 1000) / 1e12) < 1e-12
    assert abs(m["achieved_tflops_full"] - flops / (m["full_step_ms"] / 1000) / 1e12) < 1e-12
    assert result["config"]["precision"] == "fp32" and get_preset("tiny").amp == "off"
    # a CPU has no tabled peak: no MFU, and the notes say why
    assert "mfu_full" not in m and any("no MFU on cpu" in n for n in result["notes"])


def _tiny_step_flops(dataset):
    import dataclasses

    from actlab.profiling.flops import train_step_flops
    from actlab.training import get_preset, with_dataset
    from actlab.training.build import build_run

    cfg = dataclasses.replace(with_dataset(get_preset("tiny"), dataset), num_threads=0)
    run = build_run(cfg, "cpu")
    try:
        return train_step_flops(run.policy, run.next_batch())  # FLOPs depend on shapes only
    finally:
        run.close()


def test_bench_train_gives_an_mfu_against_a_given_peak(tiny_dataset):
    from actlab.training.bench import run_bench
    from actlab.training.config import apply_train_overrides
    from actlab.training.presets import get_preset

    cfg = apply_train_overrides(get_preset("tiny"), ["num_threads=0"])
    result = run_bench(cfg, str(tiny_dataset), steps=1, rounds=1, peak_tflops=0.05)
    m = result["metrics"]
    assert m["peak_tflops"] == 0.05
    assert abs(m["mfu_full"] - m["achieved_tflops_full"] / 0.05) < 1e-12
    assert abs(m["mfu_model_only"] - m["achieved_tflops_model_only"] / 0.05) < 1e-12
    assert any("--peak-tflops" in n for n in result["notes"])


def test_bench_train_compares_cached_features_with_the_encoder_every_step(tiny_dataset):
    from actlab.errors import ActlabError
    from actlab.training.bench import run_bench
    from actlab.training.config import apply_train_overrides
    from actlab.training.presets import get_preset

    frozen = ["num_threads=0", "policy.freeze_backbone=true", "policy.n_obs_steps=2", "augment.shift_pad=0"]
    cfg = apply_train_overrides(get_preset("tiny"), frozen)
    result = run_bench(cfg, str(tiny_dataset), steps=1, rounds=2, compare_features=True)
    m = result["metrics"]
    assert m["cached_features_step_ms"] == m["model_only_step_ms"] and m["encoder_every_step_ms"] > 0
    assert result["ratios"]["encoder_every_step_vs_cached"] > 0
    assert "cnn_small (frozen), 16 frames per batch" in result["config"]["backbone"]  # 8 samples x 2 frames
    with pytest.raises(ActlabError, match="caches no features"):
        run_bench(apply_train_overrides(get_preset("tiny"), ["num_threads=0"]), str(tiny_dataset), steps=1,
                  rounds=1, compare_features=True)  # fmt: skip
