"""``actlab demo`` at toy scale: every stage for real (sim recording, training, sweep, media, report)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

from actlab.cli import main
from actlab.training.loop import KILL_AT_STEP_ENV
from procs import run_cli

pytest.importorskip("mujoco")

# One evaluation episode a checkpoint: an untrained toy policy runs each to the task's 300-step limit.
# One worker: the demo records and evaluates in this process (no pool to start).
EVAL_EPISODES = 1
TOY = ["--episodes", "4", "--eval-episodes", str(EVAL_EPISODES), "--videos", "1", "--device", "cpu"]
TOY += ["--workers", "1"]
TOY += ["--set", "checkpoint.every=10", "--set", "eval.every=10", "--set", "log.every=5"]


def _demo(out, *extra: str) -> int:
    return main(["demo", "--out", str(out), *TOY, *extra])


def _summary(out) -> dict:
    return json.loads((out / "summary.json").read_text())


def _check_report(out: Path) -> None:
    """Every picture and link of the demo's report in ``out`` exists, and it says what the evaluations'
    results.json files say."""
    s = _summary(out)
    # Every picture and link of the report exists, and the pictures are real PNGs.
    md = (out / "report.md").read_text()
    # It ends with what to do next (the last heading), each command as summary.json lists it
    # (tests/demo/test_next_steps.py parses them).
    assert md[md.rindex("\n## ") :].startswith("\n## Next: what to do with this policy")
    assert len(s["next_steps"]) == 6 and all(n["command"] in md for n in s["next_steps"])
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    links = re.findall(r"\]\(([^)]+\.mp4)\)", md)
    assert {"scene.png", "run/training.png", "eval/success_vs_step.png"} <= set(images)
    assert any("whiskers" in p for p in images) and any("videos" in p for p in links)
    for rel in images:
        assert (out / rel).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", rel
    for rel in links:
        assert (out / rel).stat().st_size > 1000, rel
    html = (out / "report.html").read_text()
    assert all(f'src="{rel}"' in html or f'poster="{rel}"' in html for rel in images)
    # Videos are players in the page (the rollout videos and the whiskers video), not only links.
    found = re.findall(
        r'<video controls muted loop playsinline preload="metadata" poster="([^"]+)" src="([^"]+)">', html
    )
    posters = {video: poster for poster, video in found}
    players = list(posters)
    assert sorted(players) == sorted(links) and any("whiskers" in p for p in players)
    # With a failure among the fresh episodes (a toy policy of a few steps fails them all), the one video is
    # of a failure, named by its class.
    media = json.loads((out / "eval" / "best" / "results.json").read_text())["checkpoints"][0]["episodes"]
    (filmed,) = [e for e in media if e["video"]]
    if not all(e["success"] for e in media):
        assert filmed["outcome"] != "success"
    assert f"eval/best/{filmed['video']}" in players
    # Its preview is its last frame (how it ended), not frame 0.
    from actlab.evaluation.video import read_video

    last = read_video(out / "eval" / "best" / filmed["video"])[-1]
    from PIL import Image

    poster = np.asarray(Image.open(out / posters[f"eval/best/{filmed['video']}"]))
    assert poster.shape == last.shape and np.array_equal(poster, last)
    assert f"(seed {filmed['seed']}): {filmed['outcome'].replace('_', ' ')}" in md

    # The summary and the report say what the sweep's results.json says about the best checkpoint, and
    # lead with the confirmation of that checkpoint on other (fresh) seeds in eval/best/results.json.
    sweep = json.loads((out / "eval" / "sweep" / "results.json").read_text())
    best = next(c for c in sweep["checkpoints"] if c["name"] == sweep["best"])
    assert s["best_checkpoint"] == best["path"] and s["best_step"] == best["step"]
    assert s["sweep"]["best_success_rate"] == best["summary"]["success_rate"]
    assert [c["success_rate"] for c in s["checkpoints"]] == [
        c["summary"]["success_rate"] for c in sweep["checkpoints"]
    ]
    confirm = json.loads((out / "eval" / "best" / "results.json").read_text())
    (c,) = confirm["checkpoints"]
    assert c["path"] == best["path"] and confirm["seed"] >= sweep["seed"] + sweep["episodes"]
    assert s["success_rate"] == c["summary"]["success_rate"] and s["outcomes"] == c["summary"]["outcomes"]
    assert s["eval_episodes"] == c["summary"]["episodes"] == EVAL_EPISODES
    n, k = c["summary"]["episodes"], c["summary"]["successes"]
    assert f"{best['name']} (step {best['step']}), put the cube in the bowl in {k} of {n} fresh" in md
    k0, n0 = best["summary"]["successes"], best["summary"]["episodes"]
    assert f"best of the sweep below with {k0} of {n0} on other seeds" in md


# Slow (76 s at a load average of 4): the default suite's demo is the killed-and-resumed one below, which
# checks the same report; this one adds stage reuse (other workers, more steps, a relative path).
@pytest.mark.slow
@pytest.mark.timeout(900)  # five demo runs: 57 s on 2 cores at a load average of 9, 440 s at 12-16
def test_demo_writes_a_complete_report_and_reuses_finished_stages(tmp_path, capsys, monkeypatch):
    out = tmp_path / "demo"
    assert _demo(out, "--set", "steps=20") == 0
    s = _summary(out)
    # It said how much disk it would use before it started, and the estimate holds (within 2x).
    err = capsys.readouterr().err
    assert re.search(r"disk: about [\d.]+ MiB \(recording .*, frame cache .*\)", err.split("[1/4]")[0]), err
    recorded = next(line for line in err.splitlines() if "recorded 4 episodes" in line)
    assert len(re.findall(r"\d s\b", recorded)) == 1, recorded  # the recording time, said once
    from actlab.demo.pipeline import DemoConfig, estimate_disk, resolve

    overrides = ("checkpoint.every=10", "eval.every=10", "log.every=5", "steps=20")
    cfg = DemoConfig(
        out=str(out), device="cpu", episodes=4, eval_episodes=EVAL_EPISODES, videos=1, overrides=overrides
    )
    parts = estimate_disk(cfg, resolve(cfg))

    def size(d: Path) -> int:
        return sum(f.stat().st_size for f in d.rglob("*") if f.is_file())

    # The total is what training reserves before its first step (every checkpoint it may keep alive and a
    # log allowance), so it bounds what the demo used; the recording and the frame cache hold within 2x.
    assert size(out) < sum(parts.values()), (size(out), parts)
    for part, d in (("recording", out / "data"), ("frame cache", out / "cache")):
        assert parts[part] / 2 < size(d) < parts[part] * 2, (part, size(d), parts[part])
    assert 0.0 <= s["success_rate"] <= 1.0 and s["eval_episodes"] == EVAL_EPISODES
    assert (out / "run" / "checkpoints" / s["best_checkpoint"].rsplit("/", 1)[-1]).is_dir()
    assert [c["step"] for c in s["checkpoints"]] == [10, 20]
    assert s["wall_s"] > 0 and s["reused_stages"] == [] and s["dataset"]["episodes"] == 4
    assert set(s["step_time"]) >= {"time_data_s", "time_fwd_bwd_s", "time_optim_s", "samples_per_s"}
    _check_report(out)

    # A second run reuses every stage, also with another number of workers (same results for any).
    capsys.readouterr()
    assert _demo(out, "--set", "steps=20", "--workers", "2") == 0
    assert _summary(out)["reused_stages"] == ["record", "train", "eval"]
    assert "reusing the finished run" in capsys.readouterr().err

    # Training longer keeps the recording, continues the run from its last checkpoint, re-evaluates.
    assert _demo(out, "--set", "steps=30") == 0
    s = _summary(out)
    assert s["reused_stages"] == ["record"]
    assert [c["step"] for c in s["checkpoints"]] == [10, 20, 30]
    assert "resuming the interrupted run from step 20" in capsys.readouterr().err

    # The same directory named another way (relative instead of absolute): still every stage reused.
    monkeypatch.chdir(tmp_path)
    assert _demo(Path("demo"), "--set", "steps=30") == 0
    assert _summary(out)["reused_stages"] == ["record", "train", "eval"]
    assert _summary(out)["train"]["samples_per_s"] > 0

    # Fewer steps than the run already has: "resuming" would train nothing and report the 30-step model
    # as the requested one, so the run starts over; more steps resume.
    import io

    from actlab.demo.pipeline import DemoConfig, StageLog, _can_resume, resolve

    def can_resume(steps: int) -> bool:
        cfg = DemoConfig(out=str(out), device="cpu", episodes=4, overrides=(f"steps={steps}",))
        return _can_resume(out / "run", resolve(cfg)["train"], StageLog(stream=io.StringIO()))

    assert can_resume(40) and can_resume(30) and not can_resume(20)


# The smallest demo that still has every part: 2 episodes (the least --episodes takes), a checkpoint
# (and a validation) every 2 of 4 steps, so the kill falls between two checkpoints and the sweep has two.
SHORT = ["--episodes", "2", "--set", "steps=4", "--set", "checkpoint.every=2", "--set", "eval.every=2"]
SHORT += ["--set", "log.every=1"]


@pytest.mark.timeout(600)  # two demo processes: 39 s on 2 cores at a load average of 9, 174 s at 12-16
def test_killed_demo_resumes_training_where_it_stopped(tmp_path, capsys):
    out = tmp_path / "demo"
    killed = run_cli(
        "demo", "--out", out, *TOY, *SHORT, env={**os.environ, KILL_AT_STEP_ENV: "2"}, timeout=280
    )
    assert killed.returncode == -9, killed.stderr  # SIGKILL right after the step-2 checkpoint
    assert not (out / "summary.json").exists()
    # The resume runs in this process (a process of its own adds only its imports, ~7 s of CPU).
    assert _demo(out, *SHORT) == 0
    assert "resuming the interrupted run from step 2" in capsys.readouterr().err
    assert _summary(out)["reused_stages"] == ["record"]
    # The resumed demo's report is complete: the suite's end-to-end run of the main job (record, train,
    # a kill, resume, evaluate, report).
    assert [c["step"] for c in _summary(out)["checkpoints"]] == [2, 4]
    _check_report(out)


def test_the_full_cpu_demo_disk_estimate():
    # 300 episodes x 163 frames (the expert's plan) x 2 cameras x 80 x 80 x 3 bytes of decoded frames,
    # and ~2 GB in all, as measured after a full CPU demo (README).
    from actlab.demo.pipeline import DemoConfig, estimate_disk, resolve

    cfg = DemoConfig(device="cpu")
    parts = estimate_disk(cfg, resolve(cfg))
    assert parts["frame cache"] == 300 * 163 * 2 * 80 * 80 * 3
    assert 1.8e9 < sum(parts.values()) < 2.2e9
    checkpoints = next(v for k, v in parts.items() if k.startswith("checkpoints ("))
    assert 10e6 < checkpoints < 80e6 and 50e6 < parts["recording"] < 120e6


def test_fresh_refuses_to_delete_a_directory_the_demo_did_not_make(tmp_path, capsys):
    (tmp_path / "precious.txt").write_text("keep me")
    assert _demo(tmp_path, "--fresh") == 2
    assert "did not create" in capsys.readouterr().err
    assert (tmp_path / "precious.txt").read_text() == "keep me"


def test_a_plain_run_never_writes_into_a_directory_the_demo_did_not_make(tmp_path, capsys):
    # A user's own dataset in data/ and run in run/: a demo run would replace both.
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "info.json").write_text("mine")
    (tmp_path / "run").mkdir()
    assert _demo(tmp_path) == 2
    assert "did not create" in capsys.readouterr().err
    assert (tmp_path / "data" / "info.json").read_text() == "mine" and (tmp_path / "run").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "run"]
    (tmp_path / "file").write_text("x")
    assert _demo(tmp_path / "file") == 2


def test_the_demo_never_deletes_a_run_directory_another_process_is_using(tmp_path, capsys):
    # The demo deletes run/ when it records again, when it trains a config the run cannot resume, and
    # with --fresh; `actlab train --out DIR/run --resume` (or a second demo) may be training in it. Here
    # this process holds the run lock, as such a run does.
    import io

    from actlab.demo.pipeline import DemoConfig, StageLog, _record, _train, resolve
    from actlab.errors import ActlabError
    from actlab.utils.lock import LOCK_FILE, DirLock

    out = tmp_path / "demo"
    run = out / "run"
    run.mkdir(parents=True)
    (out / "demo_state.json").write_text("{}")
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    # (toy sizes: before the fix the demo went on to record and train after deleting run/)
    cfg = DemoConfig(out=str(out), device="cpu", episodes=2, image_size=16, workers=1, overrides=("steps=1",))
    plan = resolve(cfg)
    log = StageLog(stream=io.StringIO())
    with DirLock(run, "run directory"):
        assert _demo(out, "--fresh", "--image-size", "16", "--set", "steps=1") == 2
        err = capsys.readouterr().err
        assert "in use by another actlab process" in err and str(run) in err
        with pytest.raises(ActlabError, match="in use by another actlab process"):
            _train(plan, out, {}, log)  # no config.json in run/: not resumable, so it would start over
        with pytest.raises(ActlabError, match="in use by another actlab process"):
            _record(cfg, plan, out, {}, log)  # a new recording makes the run stale
        assert (run / "metrics.jsonl").read_text() == '{"step": 1}\n'
    assert sorted(p.name for p in run.iterdir()) == ["metrics.jsonl"]  # the lock file went with the lock
    # Once nobody uses it, the demo deletes it.
    from actlab.demo.pipeline import _remove_run

    _remove_run(run)
    assert not run.exists() and not list(out.rglob(LOCK_FILE))


def test_few_eval_episodes_film_at_most_that_many_unless_told_otherwise(tmp_path, capsys):
    # `--eval-episodes 2` without --videos was refused (the default 3 videos > 2 episodes) with no fix.
    from actlab.cli import build_parser
    from actlab.demo.pipeline import DEFAULT_VIDEOS, DemoConfig

    assert DemoConfig(eval_episodes=2).videos == 2
    assert DemoConfig(eval_episodes=50).videos == DEFAULT_VIDEOS
    assert build_parser().parse_args(["demo", "--eval-episodes", "2"]).videos is None
    # An explicit count is never changed behind the user's back: refused, naming the flag and the fix.
    assert _demo(tmp_path / "d", "--eval-episodes", "2", "--videos", "3") == 2
    err = capsys.readouterr().err
    assert "--videos" in err and "--videos 2 or fewer" in err


# Slow (33 s at a load average of 4): tests/evaluation/test_realtime.py covers the sweep itself.
@pytest.mark.slow
@pytest.mark.timeout(600)  # three demo runs, the second with a 5-cell sweep of 2 episodes each
def test_realtime_adds_a_delay_sweep_of_the_best_checkpoint_only_when_asked(tmp_path, capsys):
    from actlab.demo.pipeline import CONFIRM_SEED, DemoConfig, run_demo

    out = tmp_path / "demo"
    overrides = ("checkpoint.every=10", "eval.every=10", "log.every=5", "steps=10")
    base = dict(out=str(out), device="cpu", episodes=2, eval_episodes=2, videos=0, workers=1)
    base.update(image_size=32, overrides=overrides)
    # Without --realtime: no sweep, no section, the summary as before.
    run_demo(DemoConfig(**base))
    assert "[1/4]" in capsys.readouterr().err
    assert "Real time" not in (out / "report.md").read_text() and not (out / "eval" / "realtime").exists()
    assert "realtime" not in _summary(out)
    assert "realtime" not in json.loads((out / "demo_state.json").read_text())

    # With it (two delays to keep the test short): the earlier stages are reused, the sweep runs.
    run_demo(DemoConfig(**base, realtime=True, realtime_delays=(0, 4)))
    err = capsys.readouterr().err
    assert "[4/5] sweeping step_0000010 over inference delays 0, 4" in err
    s = _summary(out)
    assert s["reused_stages"] == ["record", "train", "eval"]
    rt = out / "eval" / "realtime"
    sweep = json.loads((rt / "sweep.json").read_text())
    cells = [(c["mode"], c["latency_steps"]) for c in sweep["cells"]]
    assert cells == [("sync", 0), ("async", 0), ("async", 4), ("blend", 0), ("blend", 4)]
    assert sweep["skipped"] == [
        {"mode": "rtc", "latency_steps": None, "reason": "not act_relative with rtc_max_delay"}
    ]  # the demo's ACT cannot take a prefix
    assert all(c["episodes"] == 2 and c["policy"] == "step_0000010" for c in sweep["cells"])
    assert [c["latency_ms"] for c in sweep["cells"]] == [0.0, 0.0, 133.3, 0.0, 133.3]  # at 30 fps
    assert sweep["seeds"].startswith(f"{CONFIRM_SEED}..{CONFIRM_SEED + 1}")  # not the recording seeds
    # The sync cell is the confirmation again: the same checkpoint on the same seeds.
    confirm = json.loads((out / "eval" / "best" / "results.json").read_text())["checkpoints"][0]["summary"]
    assert sweep["cells"][0]["successes"] == confirm["successes"]
    assert (rt / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| blend | 4 (133 ms)" in (rt / "sweep.md").read_text()
    assert [(c["mode"], c["latency_steps"]) for c in s["realtime"]["cells"]] == cells
    md = (out / "report.md").read_text()
    section = md.split("## Real time", 1)[1]
    assert "](eval/realtime/sweep.png)" in section and "| async | 4 (133 ms) |" in section
    assert "async: the arm executes the old chunk while the next is computed" in section
    assert "blend: as async, but where the new chunk overlaps" in section
    assert "rtc (not act_relative" in section
    assert 'src="eval/realtime/sweep.png"' in (out / "report.html").read_text()

    # Again: the sweep is reused like every other stage.
    run_demo(DemoConfig(**base, realtime=True, realtime_delays=(0, 4)))
    assert _summary(out)["reused_stages"] == ["record", "train", "eval", "realtime"]
    assert "reusing the delay sweep" in capsys.readouterr().err


def test_the_demo_records_with_the_codec_asked_for(tmp_path):
    """--codec pins the recording's codec (auto writes h264 on a busy CPU: two runs on differently loaded
    machines would train on differently compressed frames), and it is a setting of the record stage."""
    import io

    from actlab.cli import build_parser
    from actlab.cli.demo import demo_config
    from actlab.datasets import open_dataset
    from actlab.demo.pipeline import StageLog, _record, resolve

    args = build_parser().parse_args(["demo", "--out", str(tmp_path), "--episodes", "2", "--image-size", "16",
                                      "--workers", "1", "--device", "cpu", "--codec", "h264"])  # fmt: skip
    cfg = demo_config(args)
    state: dict = {}
    _record(cfg, resolve(cfg), tmp_path, state, StageLog(stream=io.StringIO()))
    info = open_dataset(tmp_path / "data").features["observation.images.top"]["info"]
    assert info["video.codec"] == "h264" and state["record"]["settings"]["codec"] == "h264"
    auto = demo_config(build_parser().parse_args(["demo", "--episodes", "2"]))
    assert auto.codec == "auto"


def test_the_cpu_demo_trains_at_batch_16_with_an_ema_unless_told_otherwise(tmp_path):
    """The CPU demo's recipe (CPU_DEMO_RECIPE over so101_sim_cpu): half the step time of the preset's batch
    32, as good at its last checkpoint (docs/benchmarks.md "Demo"); a --set of the same keys wins, and other
    presets are left as they are."""
    from actlab.demo.pipeline import DemoConfig, resolve

    train = resolve(DemoConfig(out=str(tmp_path / "d"), device="cpu"))["train"]
    assert (train.batch_size, train.ema_decay, train.steps) == (16, 0.995, 5000)
    told = ("batch_size=32", "ema_decay=0.0")
    train = resolve(DemoConfig(out=str(tmp_path / "d"), device="cpu", overrides=told))["train"]
    assert (train.batch_size, train.ema_decay) == (32, 0.0)
    from actlab.training import get_preset

    tiny = get_preset("tiny")
    train = resolve(DemoConfig(out=str(tmp_path / "d"), device="cpu", preset="tiny"))["train"]
    assert (train.batch_size, train.ema_decay) == (tiny.batch_size, tiny.ema_decay)
