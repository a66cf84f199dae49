"""The guard of a residual run: the policy handed back is the base until a residual is significantly
better on the same seeds; a residual below the base for consecutive evaluations is rolled back, then the
run is stopped, and the run says why (log, summary, checkpoints)."""

from __future__ import annotations

import json

import pytest
import torch

from actlab.rl.config import get_preset, replace_keys
from actlab.rl.guard import GuardState, adapt_to_base, decide, handed_back
from actlab.rl.train import train_rl


def _guard(base_solved: int, n: int = 20, **residual) -> tuple[GuardState, object]:
    cfg = replace_keys(
        get_preset("residual"), {"base": "b", **{f"residual.{k}": v for k, v in residual.items()}}
    )
    state = GuardState(bound=cfg.residual.bound_start)
    state.base = {"per_seed": [i < base_solved for i in range(n)], "successes": base_solved, "episodes": n}
    return state, cfg


def _solved(k: int, n: int = 20, start: int = 0) -> list[bool]:
    return [start <= i < start + k for i in range(n)]


def test_the_base_is_handed_back_until_a_residual_is_significantly_better():
    state, cfg = _guard(10)
    d = decide(state, cfg, 100, _solved(13))  # 3 gained, 0 lost: p = 0.25
    assert d.action == "keep" and not d.new_best and d.good and handed_back(state) == "base"
    assert state.bound == pytest.approx(0.5)  # not below the base: widened from 0.25
    d = decide(state, cfg, 200, _solved(19))  # 9 gained: p = 0.0039
    assert d.new_best and d.comparison["verdict"] == "better" and handed_back(state) == "step_0000200"
    d = decide(state, cfg, 300, _solved(16))  # better than the base, but not better than step 200
    assert not d.new_best and handed_back(state) == "step_0000200"
    assert [e["event"] for e in state.events] == ["widened", "handed_back", "widened"]
    assert state.bound == 1.0  # capped at the full bound


def test_a_residual_below_the_base_is_rolled_back_then_the_run_stopped_with_the_reason():
    state, cfg = _guard(10, patience=2, max_rollbacks=1)
    assert decide(state, cfg, 100, _solved(10)).good  # equal: the last good residual is step 100
    assert decide(state, cfg, 200, _solved(8)).action == "keep"  # below once: patience
    d = decide(state, cfg, 300, _solved(7))
    assert d.action == "rollback" and "rolled back to the residual of step 100" in d.reason
    assert "2 consecutive evaluations below the base" in d.reason and "3 lost" in d.reason
    assert state.bound == pytest.approx(0.25) and state.rollbacks == 1  # 0.5 after step 100, halved
    assert decide(state, cfg, 400, _solved(9)).action == "keep"
    d = decide(state, cfg, 500, _solved(2))
    assert d.action == "stop" and d.reason.startswith("stopped after 1 roll-backs")
    assert handed_back(state) == "base"
    assert [e["event"] for e in state.events] == ["widened", "rolled_back", "stopped"]


def test_a_weak_base_starts_at_the_full_bound_without_the_size_penalty_a_medium_one_narrow():
    state, cfg = _guard(5)  # 25 % of the evaluation seeds: under the preset's 0.5
    state.base["success_rate"] = 0.25
    reason = adapt_to_base(state, cfg)
    assert state.weak_base and state.bound == 1.0
    assert reason.startswith("weak base: 5/20") and "0.25 -> 1" in reason
    assert [e["event"] for e in state.events] == ["weak_base"]
    assert adapt_to_base(state, cfg) is None and len(state.events) == 1  # once
    # the guard's rules still hold for it: two evaluations below the base roll back and halve the bound
    decide(state, cfg, 100, _solved(3))
    assert decide(state, cfg, 200, _solved(3)).action == "rollback" and state.bound == 0.5
    for solved, weak_below in ((10, 0.5), (1, 0.0)):  # a 50 % base, and a run with weak_below off
        state, cfg = _guard(solved, weak_below=weak_below)
        state.base["success_rate"] = solved / 20
        assert adapt_to_base(state, cfg) is None and not state.weak_base and state.bound == 0.25


def _tiny(base, **keys):
    small = {
        "base": str(base), "env.num_envs": 2, "env.max_steps": 20, "total_env_steps": 400,
        "sac.learning_starts": 20, "sac.actor_starts": 20, "sac.batch_size": 16, "sac.hidden": 16,
        "sac.buffer_size": 1000, "eval.episodes": 4, "eval.every": 40, "checkpoint.every": 0,
        "residual.confirm_episodes": 4,
    }  # fmt: skip
    return replace_keys(get_preset("residual"), {**small, **keys})


@pytest.mark.timeout(300)
def test_a_run_whose_residual_is_not_better_hands_back_the_base(tiny_base, tmp_path):
    """The tiny random base solves none of the seeds, nor does its residual: no evidence, the base."""
    from actlab.rl.report import rl_report

    summary = train_rl(_tiny(tiny_base, total_env_steps=80), tmp_path / "run", progress=False)
    assert summary.handed_back == "base" and not (tmp_path / "run/checkpoints/best.json").exists()
    base = summary.guard["base"]
    assert base["episodes"] == 4 and len(base["per_seed"]) == 4  # measured on the run's eval seeds first
    rows = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert rows[0].get("eval/base_success") == base["success_rate"]  # before any training round
    # a base solving none of the seeds is weak: the full bound and no size penalty from the start, said
    assert summary.guard["weak_base"] and summary.guard["events"][0]["event"] == "weak_base"
    assert rows[1]["guard/event"] == "weak_base" and rows[1]["guard/reason"].startswith("weak base: 0/4")
    last = json.loads((tmp_path / "run/checkpoints/last.json").read_text())["path"]
    state = json.loads((tmp_path / f"run/checkpoints/{last}/training_state/state.json").read_text())
    assert state["guard"]["weak_base"] and state["guard"]["bound"] == 1.0
    assert summary.final_eval["vs_base"]["verdict"] == "no evidence"
    result = rl_report(tmp_path / "run", episodes=2, seed=7, out=tmp_path / "report", batch_envs=2)
    assert result["handed_back"] == "base" and result["paired_test"]["verdict"] == "no evidence"
    page = (tmp_path / "report/report.md").read_text()
    assert "handed back: **the base**" in page and "not handed back" in page
    # a checkpoint asked for by path is evaluated, and the report still says the run hands back the base
    last = json.loads((tmp_path / "run/checkpoints/last.json").read_text())["path"]
    ckpt = tmp_path / "run/checkpoints" / last
    asked = rl_report(ckpt, episodes=2, seed=7, out=tmp_path / "report2", batch_envs=2)
    assert asked["handed_back"] == "base" and asked["asked"] and asked["residual_checkpoint"] == str(ckpt)
    page = (tmp_path / "report2/report.md").read_text()
    assert "handed back: **the base**" in page
    assert f"the checkpoint asked for, {ckpt}, not handed back" in page


@pytest.mark.timeout(300)
def test_a_planted_worse_residual_is_rolled_back_then_stopped_and_the_run_says_why(
    tiny_base, tmp_path, monkeypatch
):
    """Planted: the base is recorded as solving every evaluation seed, so every residual is below it."""
    from actlab.rl import train as train_mod

    def planted_base(self):
        n = self.cfg.eval.episodes
        self.guard.base = {"seed": self.cfg.eval.seed, "episodes": n, "per_seed": [True] * n,
                           "successes": n, "success_rate": 1.0}  # fmt: skip

    monkeypatch.setattr(train_mod._Trainer, "_measure_base", planted_base)
    cfg = _tiny(tiny_base, **{"residual.patience": 2, "residual.max_rollbacks": 1})
    summary = train_rl(cfg, tmp_path / "run", progress=False)
    assert summary.stopped == "regressed" and summary.env_steps < cfg.total_env_steps
    assert summary.handed_back == "base"
    events = summary.guard["events"]
    assert [e["event"] for e in events] == ["rolled_back", "stopped"]
    assert "rolled back to the zero residual" in events[0]["reason"]
    assert "4 lost of 4" in events[0]["reason"] and "stopped after 1 roll-backs" in events[1]["reason"]
    log = (tmp_path / "run/metrics.jsonl").read_text()
    reasons = [json.loads(r) for r in log.splitlines() if "guard/event" in r]
    assert [(r["guard/event"], r["guard/reason"]) for r in reasons] == [
        ("rollback", events[0]["reason"]),
        ("stop", events[1]["reason"]),
    ]
    # the roll-back step was checkpointed with the zero residual (the base's actions exactly)
    from safetensors.torch import load_file

    step = events[0]["step"]
    agent = load_file(str(tmp_path / f"run/checkpoints/step_{step:07d}/agent.safetensors"))
    assert torch.count_nonzero(agent["actor.mean.weight"]) == 0
    state = json.loads((tmp_path / f"run/checkpoints/step_{step:07d}/training_state/state.json").read_text())
    assert state["guard"]["rollbacks"] == 1 and state["guard"]["bound"] == pytest.approx(0.125)
    assert state["policy_bound"] == pytest.approx(0.125)  # the rolled-back actor runs at the narrowed bound
    from actlab.rl.train import load_agent

    assert load_agent(tmp_path / f"run/checkpoints/step_{step:07d}").bound == pytest.approx(0.125)


@pytest.mark.timeout(300)
def test_a_residual_not_below_the_base_is_confirmed_on_fresh_seeds_even_on_a_resume(
    tiny_base, tmp_path, monkeypatch
):
    """A run that ends handing back the base (its last residual equal to the base on the 4 evaluation
    seeds) runs both again on residual.confirm_episodes fresh seeds and hands the residual back when it
    is significantly better there. Planted: on the confirmation's seeds the base solves none, the
    residual all (the tiny random base solves nothing, so the comparison itself is what is under test).
    The confirmation's keys may change on a resume: here the finished run is resumed with it on."""
    import dataclasses

    from actlab.rl import evaluate as evaluate_mod

    real = evaluate_mod.evaluate_agent

    def planted(agent, cfg, episodes=None, seed=None):
        result = real(agent, cfg, episodes, seed)
        if seed == cfg.residual.confirm_seed:
            solved = agent.bound > 0  # the residual, not the base (bound 0: the base's actions exactly)
            result.episodes[:] = [dataclasses.replace(e, success=solved) for e in result.episodes]
        return result

    monkeypatch.setattr(evaluate_mod, "evaluate_agent", planted)
    run = tmp_path / "run"
    first = train_rl(
        _tiny(tiny_base, total_env_steps=80, **{"residual.confirm_episodes": 0}), run, progress=False
    )
    assert first.handed_back == "base" and first.final_eval["vs_base"]["verdict"] == "no evidence"
    cfg = _tiny(tiny_base, total_env_steps=80, **{"residual.confirm_episodes": 8})
    summary = train_rl(cfg, run, resume=True, progress=False)  # nothing to train: the confirmation only
    step = f"step_{summary.env_steps:07d}"
    assert summary.handed_back == step
    events = [e["event"] for e in summary.guard["events"]]
    assert summary.guard["weak_base"] and events.count("weak_base") == 1  # kept by the resume, not redone
    best = json.loads((run / "checkpoints/best.json").read_text())
    assert best["path"] == step and best["comparison_with_base"]["verdict"] == "better"
    event = summary.guard["events"][-1]
    assert event["event"] == "handed_back" and "on 8 fresh seeds 300000..300007" in event["reason"]
    assert "8 seeds gained, 0 lost" in event["reason"]
    # the checkpoint records it, so a later resume keeps it
    state = json.loads((run / f"checkpoints/{step}/training_state/state.json").read_text())
    assert state["guard"]["best"]["confirmed_on"] == [300000, 8]
