"""Training opens its dataset through the doctor's cheap checks, and trains at any image size."""

import shutil

import numpy as np
import pyarrow.parquet as pq

from actlab.cli import main

DATA = "data/chunk-000/file-000.parquet"


def test_rows_out_of_order_are_refused_before_training(tiny_dataset, tmp_path, capsys):
    # Rows of episode 1 reversed: actions would be paired with the wrong frames' windows.
    ds = shutil.copytree(tiny_dataset, tmp_path / "ds")
    table = pq.read_table(ds / DATA)
    order = np.arange(table.num_rows)
    order[40:80] = order[40:80][::-1]
    pq.write_table(table.take(order), ds / DATA)
    out = tmp_path / "run"
    args = ["train", "--preset", "tiny", "--dataset", str(ds), "--out", str(out), "--set", "steps=2"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"dataset {ds.resolve()} fails the check `frame_index`" in err
    assert "episode 1" in err and f"actlab data doctor {ds.resolve()}" in err
    assert not (out / "checkpoints").exists()
