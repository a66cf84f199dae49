"""Faults of our twenty-seventh planted-fault run (docs/faults.md "Twenty-seventh fault run"), planted for
real: real commands, real files. Each test names the probes of docs/faults_round27_probes.md it plants
again and what happened before its fix.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from procs import run_cli, started

EVAL = ["--episodes", "1", "--max-steps", "2", "--workers", "1"]


def _edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _zero_middle(path: Path, nbytes: int = 4096) -> None:
    """Zeros over ``nbytes`` in the middle of ``path``, its size and mtime kept: finite weights of other
    values (a damaged disk block), which nothing but a digest tells from the saved ones."""
    st = path.stat()
    with open(path, "r+b") as f:
        f.seek(st.st_size // 2)
        f.write(b"\0" * nbytes)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _drop_digest(record: str, key: str = "sha256", name: str = "model.safetensors"):
    """An edit of a JSON record of digests ``key``: emptied, or without ``name``'s entry."""

    def edit(meta: dict) -> None:
        if record == "emptied":
            meta[key] = {}
        else:
            del meta[key][name]

    return edit


# ------------------------------------------------------------------ a bundle's record of its digests
@pytest.mark.parametrize("record", ["emptied", "weights_entry_removed"])
def test_a_bundle_whose_record_lacks_its_weights_digest_says_they_are_not_verified(record, bundle, tmp_path):
    """SILENT before (ev_sha_empty_wzero, ev_sha_no_weights_key_wzero, rs_sha_*_wzero, exp_sha_nokey_wzero,
    imp_sha_empty_rec_matched, dm_ckpt_sha_empty, lr_sha_*, lt_resume_sha_*, le_sha_empty_wzero): an
    actlab.json whose sha256 record was emptied, or lost the entry of model.safetensors, left the weights
    unverified without a word: weights damaged in their middle were evaluated, trained on, exported and
    run by the plugin, exit 0 (or, where the damage made NaN, blamed on the policy's output or the learning
    rate: UNCLEAR, ev_sha_empty_wmid, rs_sha_empty_wmid). Now loaded with a warning naming the files."""
    copy = shutil.copytree(bundle, tmp_path / "b")
    _edit_json(copy / "actlab.json", _drop_digest(record))
    _zero_middle(copy / "model.safetensors")
    res = run_cli("eval", copy, *EVAL, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "records no sha256 of" in res.stderr and "model.safetensors" in res.stderr, res.stderr[-2000:]
    assert "not verified" in res.stderr


def test_an_exports_swapped_bundle_without_its_record_is_refused(export, tmp_path):
    """SILENT before (evlp_swap_bundle_sha_rm): an export whose actlab_bundle/ was replaced by another
    bundle whose actlab.json lost its sha256 record passed the export's check (its bundle records nothing
    to compare): eval --lerobot-policy ran the other weights under the export's name, exit 0 (the loader's
    warning stayed in the bridge's child). Now the bundle's files are compared by their own sha256."""
    import torch

    from actlab.cli import main
    from actlab.policies import save_policy
    from actlab.policies.info import synthetic_features, unit_stats
    from actlab.policies.registry import make_policy
    from actlab.training import get_preset

    cfg = get_preset("tiny").policy
    feats = synthetic_features(6, 6, ("top", "wrist"), (16, 16))
    torch.manual_seed(7)
    save_policy(make_policy(cfg, feats, unit_stats(cfg, feats), pretrained=False), tmp_path / "other")
    swapped = shutil.copytree(export, tmp_path / "swapped")
    shutil.rmtree(swapped / "actlab_bundle")
    shutil.copytree(tmp_path / "other", swapped / "actlab_bundle")
    _edit_json(swapped / "actlab_bundle" / "actlab.json", lambda meta: meta.pop("sha256"))
    assert main(["policy", "import", str(swapped), "--out", str(tmp_path / "imp")]) == 2
    assert not (tmp_path / "imp").exists()
    # the same check in eval's parent, before any child starts (no lerobot needed to see the refusal)
    res = run_cli("eval", "--lerobot-policy", swapped, "--lerobot-python", sys.executable, *EVAL, timeout=300)
    assert res.returncode == 2, res.stderr[-2000:]
    assert "not the bundle it exported" in res.stderr, res.stderr[-2000:]


def test_the_doctor_compares_a_checkpoint_without_a_weights_record_by_its_file(
    run_dir, tiny_dataset, tmp_path
):
    """SILENT before (ds_retrain_newsha_rm, ds_retrain_newsha_empty): a sweep's checkpoints whose
    actlab.json lost the record of their weights, the weights changed since the sweep, were skipped by the
    doctor's check: "ok ... 0/2 success on the sweep's seeds", the old weights' success judged the new
    ones, exit 0. Now a checkpoint without the record is compared by its file's own sha256: refused."""
    run = shutil.copytree(run_dir, tmp_path / "run")
    sweep = tmp_path / "sweep"
    res = run_cli("eval", run, *EVAL, "--out", sweep, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    ckpts = sorted((run / "checkpoints").glob("step_*"))
    for ckpt in ckpts:
        _edit_json(ckpt / "actlab.json", lambda meta: meta.pop("sha256"))
        _zero_middle(ckpt / "model.safetensors")
    res = run_cli("policy", "doctor", ckpts[-1], "--dataset", tiny_dataset, "--sweep", sweep, timeout=300)
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    assert "measured other weights" in res.stderr, res.stderr[-2000:]


# ------------------------------------------------------------------ a checkpoint's records
@pytest.mark.parametrize("record", ["entry_removed", "emptied"])
def test_a_training_state_file_its_checkpoint_does_not_record_is_said_unverified(record, run_dir, tmp_path):
    """SILENT before (rs_opt_sha_rm_zero, rs_opt_sha_empty_zero, rs_rng_sha_rm_zero; rl_agent_sha_rm_zero2
    and its kin in rl train): state.json's sha256 record without the entry of optimizer.pt (or emptied),
    optimizer.pt zeroed in its middle, resumed from the damaged state without a word, exit 0. Now the
    file is loaded with a warning that it is not verified."""
    run = shutil.copytree(run_dir, tmp_path / "run")
    state_dir = sorted((run / "checkpoints").glob("step_*"))[-1] / "training_state"

    _edit_json(state_dir / "state.json", _drop_digest(record, name="optimizer.pt"))
    _zero_middle(state_dir / "optimizer.pt", 256)
    res = run_cli(
        "train", "--resume", "--out", run, "--set", "steps=3", "--set", "log.progress=false", timeout=300
    )
    assert "optimizer.pt is not verified" in res.stderr, res.stderr[-2000:]


def test_a_resume_whose_videos_record_lost_a_digest_names_the_checkpoint(run_dir, tmp_path):
    """UNCLEAR before (rs_vid_entry_empty_dict): a checkpoint's record of one video emptied to {} blamed the
    dataset, "the dataset's ... changed since step_N was trained on it (sha256 None -> ...)", fix "resume
    with the original dataset": the dataset given was the original. Now the checkpoint's damaged record is
    named (as a record that is not an object was since the 26th run)."""
    run = shutil.copytree(run_dir, tmp_path / "run")
    ckpt = sorted((run / "checkpoints").glob("step_*"))[-1]

    def edit(meta: dict) -> None:
        videos = meta["extra"]["train"]["dataset"]["videos"]
        videos[sorted(videos)[0]] = {}

    _edit_json(ckpt / "actlab.json", edit)
    res = run_cli(
        "train", "--resume", "--out", run, "--set", "steps=3", "--set", "log.progress=false", timeout=300
    )
    assert res.returncode == 2, res.stderr[-2000:]
    assert "record of the videos its run reads is damaged" in res.stderr, res.stderr[-2000:]


# ------------------------------------------------------------------ a writer's pid, reused
_LAST_PID = Path("/proc/sys/kernel/ns_last_pid")


def test_a_leftover_whose_pid_a_later_process_took_does_not_hold_its_output(rec2, tmp_path, capsys):
    """UNCLEAR before (pid_reuse_tmp_live_sleep): the temporary of a writer that died, its pid since taken
    by another process (a reboot or a long uptime reuses pids), refused the rerun: "another actlab process
    (pid N) is writing this output directory now", fix "wait for pid N to finish (or stop it)", of a
    process that is no actlab's. Now a process that started after the temporary last changed is not its
    writer: the leftover is removed and the output written. The reused pid is made for real: the kernel's
    next pid is set (root) after the temporary is made."""
    from actlab.cli import main
    from actlab.utils.procs import host_tag

    out = tmp_path / "cur"
    for _ in range(20):
        try:
            pid = int(_LAST_PID.read_text()) + 50
        except OSError:
            pytest.skip("no /proc/sys/kernel/ns_last_pid here")
        leftover = tmp_path / f".cur.actlab-{host_tag()}-{pid}-0123abcd.tmp"
        leftover.mkdir()
        (leftover / ".actlab-output.json").write_text(json.dumps({"kind": "actlab data curate"}))
        time.sleep(1.5)  # the process below starts well after the leftover last changed
        try:
            _LAST_PID.write_text(str(pid - 1))
        except OSError:
            pytest.skip("setting the next pid needs root")
        with started(["sleep", "60"]) as proc:
            if proc.pid != pid:  # another process took it first: again
                shutil.rmtree(leftover)
                continue
            capsys.readouterr()
            assert main(["data", "curate", str(rec2), "--out", str(out), "--drop-episodes", "1"]) == 0, (
                capsys.readouterr().err
            )
            assert proc.poll() is None  # the process of that pid is untouched
        assert (out / "meta" / "info.json").is_file()
        assert not leftover.exists()
        return
    pytest.skip("the next pid was taken by other processes 20 times")


def test_bench_threads_refuses_a_thread_count_past_the_ceiling_of_every_threads_option():
    """HANG before (bench_threads_999): `bench threads --threads 999` (a comma list: the parser's ceiling
    of 256 for --threads never saw it) started 999 torch threads on 2 CPUs and had not ended after 200 s.
    Now refused before any work, as eval's --threads 999 is."""
    res = run_cli("bench", "threads", "--preset", "tiny", "--threads", "1,999", "--rounds", "1", timeout=60)
    assert res.returncode == 2, res.stderr[-2000:]
    assert "thread counts are <= 256" in res.stderr, res.stderr[-2000:]


def test_a_demo_checkpoint_edited_with_its_record_removed_is_evaluated_again(run_dir, tmp_path):
    """SILENT before (dm_ckpt_cfg_edit_sha_key_rm2): a demo checkpoint's config.json edited
    (n_action_steps 8 -> 2: another policy at run time) with its entry removed from actlab.json's sha256:
    the next demo reused the unedited bundle's evaluation ("reusing the evaluation"), exit 0. A file the
    bundle records no digest of now enters the evaluation record by its own digest."""
    from actlab.demo.run_check import CHECKPOINTS, evaluation_outdated, run_checkpoints

    run = shutil.copytree(run_dir, tmp_path / "run")
    entry = {"result": {CHECKPOINTS: run_checkpoints(run)}}
    assert not evaluation_outdated(entry, run, stream=io.StringIO())
    ckpt = sorted((run / "checkpoints").glob("step_*"))[-1]
    _edit_json(ckpt / "actlab.json", lambda meta: meta["sha256"].pop("config.json"))
    _edit_json(ckpt / "config.json", lambda cfg: cfg.update(n_action_steps=1))
    said = io.StringIO()
    assert evaluation_outdated(entry, run, stream=said)
    assert f"{ckpt.name}'s files were edited" in said.getvalue()


def test_a_weights_write_on_a_full_disk_is_said_to_be_a_full_disk(small_fs):
    """UNCLEAR before (full_disk_reward_model2): `rl reward-model --out` on a full disk: safetensors'
    "Error while serializing: I/O error: No space left on device (os error 28)" was "a weights file cannot
    be read: it is damaged or not that kind of file", fix "restore the file ... actlab data doctor". The
    write of real weights onto a real full tmpfs, through the CLI's translation of the error."""
    import torch
    from safetensors.torch import save_file

    from actlab.errors import from_environment

    disk = small_fs(64 * 1024)
    with pytest.raises(Exception) as caught:
        save_file({"w": torch.zeros(256 * 1024)}, str(disk / "model.safetensors"))
    err = from_environment(caught.value)
    assert err is not None and err.problem == "the disk is full", err
    assert "df -h" in err.fix


@pytest.mark.parametrize("record", ["emptied", "weights_entry_removed"])
def test_an_export_whose_records_both_lack_the_weights_is_refused(record, export, tmp_path):
    """SILENT before (evlp_sha_empty_wzero; UNCLEAR evlp_sha_empty_wmid, NaN blamed on the policy):
    actlab_export.json's bundle_sha256 and the bundle's actlab.json sha256 both emptied (or both without
    model.safetensors), the weights damaged: the export's check compared nothing, and eval --lerobot-policy
    ran the damaged weights, the loader's warning in the bridge's child unseen, exit 0. An export records
    all four files: a record without one is refused as damaged, in eval's parent."""
    copy = shutil.copytree(export, tmp_path / "x")
    _edit_json(copy / "actlab_bundle" / "actlab.json", _drop_digest(record))

    _edit_json(copy / "actlab_export.json", _drop_digest(record, key="bundle_sha256"))
    _zero_middle(copy / "actlab_bundle" / "model.safetensors")
    res = run_cli("eval", "--lerobot-policy", copy, "--lerobot-python", sys.executable, *EVAL, timeout=300)
    assert res.returncode == 2, res.stderr[-2000:]
    assert "the export's record of its bundle is damaged" in res.stderr, res.stderr[-2000:]
