import math

import pytest

from actlab.errors import ActlabError
from actlab.viz.training import loss_keys, plot_training


def _rows(n=30):
    rows = []
    for s in range(1, n + 1):
        rows.append({"step": s, "loss": 5 * math.exp(-s / 10), "l1_loss": math.exp(-s / 10), "kld_loss": 0.1,
                     "lr": 1e-3, "lr_backbone": 1e-4, "grad_norm": 1.0, "samples_per_s": 300.0,
                     "time_data_s": 0.001, "time_fwd_bwd_s": 0.02, "time_optim_s": 0.005})  # fmt: skip
        if s % 10 == 0:
            rows.append({"step": s, "val_loss": 1.0 / s, "time_eval_s": 0.1})
            rows.append({"step": s, "checkpoint": f"step_{s:07d}", "time_checkpoint_s": 0.05})
    return rows


def test_plot_writes_an_image_of_every_panel(tmp_path):
    out = plot_training(_rows(), tmp_path / "training.png", title="t")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    assert loss_keys(_rows()) == ["loss", "kld_loss", "l1_loss"]  # val_loss is drawn apart
    plot_training(_rows(), tmp_path / "training.svg")
    assert (tmp_path / "training.svg").read_text().lstrip().startswith("<?xml")


def test_plot_refuses_bad_inputs(tmp_path):
    with pytest.raises(ActlabError, match="unsupported plot format"):
        plot_training(_rows(), tmp_path / "x.jpg")
    with pytest.raises(ActlabError, match="no training rows"):
        plot_training([{"step": 1, "val_loss": 1.0}], tmp_path / "x.png")
    assert not list(tmp_path.iterdir())  # nothing half-written
