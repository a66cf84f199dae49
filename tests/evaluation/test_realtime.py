"""Real time on the SO-101 sim: chunks computed while the previous one executes (actlab eval --execution
--latency), on real MuJoCo envs with a real (tiny, untrained) act_relative bundle and the scripted
expert's time-indexed plan."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from evalpolicies import ExpertChunkPolicy, tiny_rel_bundle

from actlab.cli import main
from actlab.errors import ActlabError
from actlab.evaluation import EnvSpec, EvalConfig, evaluate_many
from actlab.evaluation.experts import expert_source
from actlab.evaluation.policy_io import ObsAdapter
from actlab.evaluation.realtime import delay_from_timings, parse_latencies, parse_modes
from actlab.evaluation.rollout import rollout
from actlab.evaluation.seeds import DEFAULT_SEED
from actlab.evaluation.sources import PolicySource
from actlab.policies.execution import ExecutionSpec

pytest.importorskip("mujoco")


@pytest.fixture(scope="module")
def rel_bundle(tmp_path_factory):
    """An untrained act_relative bundle (chunk 12, 6 actions per chunk, rtc_max_delay 4) for the sim."""
    return tiny_rel_bundle(tmp_path_factory.mktemp("rt") / "bundle")


def _run(bundle, execution, episodes=3, batch=2, max_steps=25):
    cfg = EvalConfig(
        episodes=episodes, workers=1, batch_envs=batch, threads_per_worker=1, execution=execution
    )
    spec = EnvSpec(max_steps=max_steps)
    (ev,) = evaluate_many([PolicySource(name="rel", path=str(bundle))], spec, cfg)
    return ev


def _same(a, b) -> None:
    """Per episode: same outcome, steps, lift and the same smoothness of the executed actions."""
    strip = dict(inference_ms=None)
    assert [dataclasses.replace(e, **strip) for e in a.episodes] == [
        dataclasses.replace(e, **strip) for e in b.episodes
    ]


def test_sync_is_unchanged_and_async_without_delay_is_sync_per_seed(rel_bundle):
    default = _run(rel_bundle, None)
    sync = _run(rel_bundle, ExecutionSpec("sync"))
    asyn = _run(rel_bundle, ExecutionSpec("async", latency=0))
    _same(default, sync)
    _same(sync, asyn)
    assert all(e.chunk_switches == 4 and e.boundary_jump is not None for e in asyn.episodes)  # 25 steps / 6
    later = _run(rel_bundle, ExecutionSpec("async", latency=3))
    assert [e.seed for e in later.episodes] == [DEFAULT_SEED, DEFAULT_SEED + 1, DEFAULT_SEED + 2]
    assert all(len(e.inference_ms) == 4 for e in later.episodes)  # timed: every inference after the first


class ClockedExpert(ExpertChunkPolicy):
    """The expert's plan as a chunked policy indexed by the env's clock: the chunk computed at step t is
    plan[t : t + H]; with a prefix its first d actions are the prefix (as act_relative returns them)."""

    config = type("Cfg", (), {"chunk_size": 30, "n_action_steps": 10, "rtc_max_delay": 8})()

    def __init__(self, env) -> None:
        super().__init__(env, horizon=30)
        self.env = env
        self.queue: list = []

    def reset(self) -> None:
        super().reset()
        self.queue = []

    def predict_action_chunk(self, obs, prefix=None):
        self.t = self.env._steps
        chunk = super().predict_action_chunk(obs)
        if prefix is not None:
            chunk[:, : prefix.shape[1]] = prefix
        return chunk

    def select_action(self, obs):
        if not self.queue:
            self.queue = list(self.predict_action_chunk(obs)[0, :10])
        return self.queue.pop(0)[None]


def test_a_time_indexed_plan_is_executed_exactly_under_any_delay():
    """Every executed action is the one its chunk planned for that step (index k at start + k): a plan
    indexed by time executes identically whatever the delay, and the expert still succeeds."""
    from actlab.evaluation.envs import make_eval_env

    env = make_eval_env(EnvSpec(image_size=32))
    try:
        runs = {}
        for spec in (None, ExecutionSpec("async", latency=8), ExecutionSpec("rtc", latency=8)):
            policy = ClockedExpert(env)
            (trace,) = rollout(policy, [env], [3], ObsAdapter(None), execution=spec)
            runs[spec.label() if spec else "sync"] = trace
    finally:
        env.close()
    sync = np.stack(runs["sync"].actions)
    assert any(i.get("is_success") for i in runs["sync"].infos)
    assert np.array_equal(np.stack(runs["async@8"].actions), sync)
    # rtc blends old and new chunks, which agree here: equal up to float rounding of w*x + (1-w)*x.
    np.testing.assert_allclose(np.stack(runs["rtc@8"].actions), sync, rtol=0, atol=1e-3)
    # Inferences start at 10, 20, ...; each arrives 8 steps later.
    assert runs["async@8"].boundaries[:3] == [18, 28, 38] and runs["sync"].boundaries[:3] == [10, 20, 30]


def test_a_sweep_is_one_table_one_figure_and_one_record_per_cell(rel_bundle, tmp_path, capsys):
    out = tmp_path / "sweep"
    args = ["eval", str(rel_bundle), "--episodes", "2", "--max-steps", "12", "--workers", "1"]
    args += [
        "--batch-envs",
        "2",
        "--latency",
        "0,2",
        "--execution",
        "sync,async,rtc",
        "--json",
        "--out",
        str(out),
    ]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    cells = [(c["mode"], c["latency_steps"]) for c in report["cells"]]
    assert cells == [("sync", 0), ("async", 0), ("async", 2), ("rtc", 0), ("rtc", 2)]
    for c in report["cells"]:
        assert c["episodes"] == 2 and c["ci_low"] <= c["success_rate"] <= c["ci_high"]
        assert c["boundary_jump"] is not None and c["chunk_switches"] == 1.0  # 12 steps, a chunk per 6
    assert report["cells"][2]["latency_ms"] == pytest.approx(66.7)
    assert json.loads((out / "sweep.json").read_text())["cells"] == report["cells"]
    from PIL import Image

    assert Image.open(out / "sweep.png").format == "PNG" and "| rel" not in (out / "sweep.md").read_text()


@pytest.mark.parametrize(
    ("flags", "match"),
    [
        (["--latency", "5", "--execution", "rtc", "--horizon", "6"], "rtc_max_delay = 4"),
        (["--latency", "12", "--execution", "async"], "not shorter than its chunk"),
        (["--latency", "0,5", "--execution", "async", "--horizon", "3"], "longer than the execution horizon"),
        (["--latency", "2", "--execution", "sync"], "sync"),
        (["--latency", "fast", "--execution", "async"], "bad latency"),
    ],
)
def test_a_delay_the_policy_cannot_take_fails_before_any_episode(
    rel_bundle, flags, match, monkeypatch, capsys
):
    import actlab.evaluation.harness as harness

    monkeypatch.setattr(harness, "run_item", lambda *a, **k: pytest.fail("an episode ran"))
    assert main(["eval", str(rel_bundle), "--episodes", "1", "--workers", "1", *flags]) == 2
    err = capsys.readouterr().err
    assert "\nerror:" in "\n" + err and match in err and "fix:" in err  # (after any busy-CPU note)


def test_the_expert_cannot_run_asynchronously():
    with pytest.raises(ActlabError, match="predicts action chunks"):
        evaluate_many([expert_source()], EnvSpec(), EvalConfig(execution=ExecutionSpec("async")))


def test_latencies_in_steps_milliseconds_or_measured():
    assert parse_latencies("0,2, 4,100ms,measured", 30) == [0, 2, 4, 3, "measured"]
    assert parse_latencies("34ms", 30) == [2]  # rounded up: 1.02 steps take 2
    # A warm-up spike (first calls) never sets the delay (lerobot #4454): the median of the rest does.
    m = delay_from_timings([900.0, 400.0, 80.0] + [40.0] * 19 + [70.0], fps=30, warmup=3)
    assert m["steps"] == 2 and m["median_ms"] == 40.0 and m["calls"] == 20 and m["p99_ms"] > 40


@pytest.mark.slow  # ~30 s on the busy 2-core machine: loads and times the bundle, then runs an episode
def test_measured_latency_times_the_bundle_and_reports_it(rel_bundle, capsys):
    """The delay is what this machine measures: a run, or (on a busy machine, a delay the 12-action
    chunk cannot cover) an error that says what was measured; either way before any episode."""
    args = ["eval", str(rel_bundle), "--episodes", "1", "--max-steps", "8", "--workers", "1"]
    code = main([*args, "--latency", "measured", "--execution", "async", "--json"])
    out, err = capsys.readouterr()
    if code == 0:
        report = json.loads(out)
        m = report["measured_inference"]["bundle"]
        assert m["calls"] == 20 and 0 < m["median_ms"] <= m["p99_ms"] and m["steps"] >= 1
        assert report["cells"][0]["latency_steps"] == m["steps"] and report["cells"][0]["measured"] == m
    else:
        assert code == 2 and "the measured inference:" in err and "ms median at batch 4" in err


def test_modes_are_checked_and_an_old_spelling_names_the_new_one():
    assert parse_modes("sync, async,rtc") == ["sync", "async", "rtc"]
    with pytest.raises(ActlabError, match="names one item twice"):  # merged without a word (25th run)
        parse_modes("sync, async,rtc,async")
    with pytest.raises(ActlabError) as e:  # the servo simulator's old name for async
        parse_modes("sync,naive")
    assert e.value.fix == "naive is now async"
    with pytest.raises(ActlabError, match="unknown execution mode"):
        parse_modes("sync,fast")


@pytest.mark.timeout(120)
def test_a_bundle_executing_its_whole_chunk_runs_under_a_delay_with_the_horizon_that_fits(tmp_path, capsys):
    """n_action_steps = chunk_size (LeRobot's ACT default): no --horizon, no refusal; the executor runs
    chunk_size - latency actions per chunk and says so, in a single evaluation and in a sweep's record."""
    bundle = tiny_rel_bundle(tmp_path / "whole", chunk_size=12, n_action_steps=12, rtc_max_delay=4)
    common = ["--episodes", "1", "--max-steps", "16", "--workers", "1", "--batch-envs", "1"]
    assert main(["eval", str(bundle), *common, "--execution", "async", "--latency", "4", "--json"]) == 0
    out, err = capsys.readouterr()
    assert "note: whole: executes 12 of its 12 actions per chunk" in err and "horizon 8" in err
    (ckpt,) = json.loads(out)["checkpoints"]
    assert ckpt["episodes"][0]["chunk_switches"] == 1  # a chunk at step 0, the next from step 8 + 4
    args = ["eval", str(bundle), *common, "--execution", "sync,async", "--latency", "0,4", "--json"]
    assert main(args) == 0
    cells = {(c["mode"], c["latency_steps"]): c for c in json.loads(capsys.readouterr().out)["cells"]}
    assert cells[("async", 4)]["horizon"] == 8 and "horizon 8" in cells[("async", 4)]["horizon_note"]
    assert cells[("async", 0)]["horizon"] == 12 and cells[("async", 0)]["horizon_note"] is None
