import importlib.util
import json

import pytest

from actlab.errors import ActlabError
from actlab.lifecycle.metrics_log import MetricsLog, read_metrics


def test_rows_flushed_truncated_on_resume_and_torn_line_skipped(tmp_path):
    log = MetricsLog(tmp_path, enabled=True, total_steps=10, progress=False)
    for s in range(1, 6):
        log.log({"step": s, "loss": 1.0 / s, "bad": float("nan")})
    assert len(read_metrics(tmp_path)) == 5  # flushed before close
    log.close()
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 6, "lo')  # a kill in the middle of a write
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5] and rows[0]["bad"] == "nan"
    # resuming from step 3 drops rows 4, 5 and the torn line
    log = MetricsLog(tmp_path, enabled=True, total_steps=10, start_step=3, progress=False)
    log.log({"step": 4, "loss": 0.2})
    log.close()
    assert [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [
        1,
        2,
        3,
        4,
    ]


def test_disabled_log_writes_nothing(tmp_path):
    log = MetricsLog(tmp_path / "x", enabled=False, total_steps=3)
    log.log({"step": 1, "loss": 1.0})
    log.close()
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(("flag", "module", "extra"), [("tensorboard", "tensorboard", "tensorboard"),
                                                        ("wandb", "wandb", "wandb")])  # fmt: skip
def test_optional_sinks_name_the_extra_to_install(tmp_path, flag, module, extra):
    if importlib.util.find_spec(module) is not None:
        pytest.skip(f"{module} is installed here")
    with pytest.raises(ActlabError, match=rf"actlab\[{extra}\]"):
        MetricsLog(tmp_path / "run", enabled=True, total_steps=1, progress=False, **{flag: True})
    assert not (tmp_path / "run").exists()  # refused before any file was written


def test_the_training_loop_moves_the_bar_every_step_not_only_on_logging_steps(
    tiny_dataset, tmp_path, monkeypatch
):
    # At 2 s a step (a loaded CPU) a bar moved once per 50-step logging window stood still for 100 s.
    from actlab.cli import main

    moves: list[tuple[int, bool]] = []
    real = MetricsLog.progress

    def spy(self, step, postfix=None):
        moves.append((step, postfix is not None))
        return real(self, step, postfix)

    monkeypatch.setattr(MetricsLog, "progress", spy)
    argv = ["train", "--preset", "tiny", "--dataset", str(tiny_dataset), "--out", str(tmp_path / "run")]
    assert main([*argv, "--set", "steps=6", "--set", "log.every=3", "--device", "cpu"]) == 0
    assert sorted({s for s, _ in moves}) == [1, 2, 3, 4, 5, 6]
    assert sorted(s for s, with_metrics in moves if with_metrics) == [3, 6]  # metrics on logging steps only
