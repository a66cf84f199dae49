"""Device resolution: every spelling of a device means the same thing everywhere; CUDA is always indexed.

The decision is a pure function of the name, LOCAL_RANK and what the machine has, so the CUDA cases are
tested here without a GPU.
"""

import pytest
import torch

from actlab.errors import ActlabError
from actlab.utils.device import device_name_for, env_local_rank, resolve_device


@pytest.mark.parametrize(
    ("name", "kwargs", "expected"),
    [
        ("auto", {"cuda_count": 0}, "cpu"),
        ("auto", {"cuda_count": 0, "mps_available": True}, "mps"),
        ("auto", {"cuda_count": 1}, "cuda:0"),  # torch.cuda.set_device needs the index
        ("cuda", {"cuda_count": 1}, "cuda:0"),
        ("CUDA", {"cuda_count": 2}, "cuda:0"),
        ("cuda:1", {"cuda_count": 2}, "cuda:1"),
        ("cpu", {"cuda_count": 4}, "cpu"),
        # torchrun: LOCAL_RANK picks the GPU of a process when the name has no index ...
        ("auto", {"cuda_count": 4, "local_rank": 3}, "cuda:3"),
        ("cuda", {"cuda_count": 4, "local_rank": 2}, "cuda:2"),
        # ... an explicit index wins in a single process ...
        ("cuda:1", {"cuda_count": 4, "local_rank": 2}, "cuda:1"),
        # ... and in a DDP job every process takes its own GPU whatever the spelling
        ("cuda:0", {"cuda_count": 4, "local_rank": 2, "distributed": True}, "cuda:2"),
        ("auto", {"cuda_count": 0, "local_rank": 1, "distributed": True}, "cpu"),
    ],
)
def test_every_spelling_resolves_to_one_device(name, kwargs, expected):
    assert device_name_for(name, **kwargs) == expected


@pytest.mark.parametrize(
    ("name", "kwargs", "problem"),
    [
        ("cuda", {"cuda_count": 0}, "no CUDA device"),
        ("cuda:0", {"cuda_count": 0}, "no CUDA device"),
        ("cuda:2", {"cuda_count": 2}, "does not exist"),
        ("cuda", {"cuda_count": 2, "local_rank": 2}, "does not exist"),  # more processes than GPUs
        ("cuda:x", {"cuda_count": 1}, "unknown device"),
        ("cudaa", {"cuda_count": 1}, "unknown device"),
        ("mps", {"cuda_count": 0}, "no MPS device"),
    ],
)
def test_impossible_devices_are_refused_with_the_field_named(name, kwargs, problem):
    with pytest.raises(ActlabError) as e:
        device_name_for(name, field="device", **kwargs)
    assert problem in e.value.problem
    assert e.value.field == "device"


def test_local_rank_comes_from_torchrun_s_environment():
    assert env_local_rank({"LOCAL_RANK": "3"}) == 3
    assert env_local_rank({}) is None
    assert env_local_rank({"LOCAL_RANK": "x"}) is None


def test_resolve_device_on_this_machine():
    assert resolve_device("cpu") == torch.device("cpu")
    auto = resolve_device("auto")
    if torch.cuda.is_available():
        assert auto.type == "cuda" and auto.index is not None
    else:
        assert auto.type in ("cpu", "mps")
        with pytest.raises(ActlabError, match="no CUDA"):
            resolve_device("cuda")
    with pytest.raises(ActlabError, match="unknown device"):
        resolve_device("gpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")  # a torch.device is accepted too


def test_train_has_a_device_flag(tmp_path, capsys):
    import json

    from actlab.cli import main

    assert main(["train", "--preset", "tiny", "--device", "cuda:1", "--print-config"]) == 0
    assert json.loads(capsys.readouterr().out)["device"] == "cuda:1"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_train_on_cuda_without_cuda_is_refused_before_anything_is_written(tiny_dataset, tmp_path, capsys):
    from actlab.cli import main

    out = tmp_path / "run"
    args = ["train", "--preset", "tiny", "--dataset", str(tiny_dataset), "--out", str(out)]
    args += ["--device", "cuda"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "no CUDA device" in err and "device" in err
    assert not out.exists()
