"""The harness on actlab's MuJoCo pick-and-place sim: the scripted expert, a random policy and policies
that fail in known ways, each classified by the taxonomy on real physics."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from evalpolicies import EarlyReleasePolicy, FreezePolicy, HoldPolicy, RandomPolicy

from actlab.evaluation import EnvSpec, EvalConfig, evaluate
from actlab.evaluation.experts import expert_factory, expert_source
from actlab.evaluation.harness import VIDEO_HOLD_S
from actlab.evaluation.results import pick_video_episodes
from actlab.evaluation.seeds import DEFAULT_SEED
from actlab.evaluation.video import read_video
from actlab.sim.env import HOME_QPOS

pytest.importorskip("mujoco")

# No cameras: these policies read the simulator state or nothing, and physics alone is ~50x faster.
BLIND = EnvSpec("so101_pick_place", cameras=())


def test_scripted_expert_succeeds_at_least_95_percent(tmp_path):
    # Two worker processes; each builds the expert once and reuses it, so every episode after the first
    # in a worker depends on the harness calling reset() (the expert replans only after a reset).
    ev = evaluate(expert_source(), BLIND, EvalConfig(episodes=20, workers=2, videos=1), out_dir=tmp_path)
    s = ev.summary
    assert s.success_rate >= 0.95, ev.episodes
    assert s.pick_rate >= 0.95 and s.drop_rate == 0.0
    assert s.max_lift_m > 0.04  # carried at ~8.5 cm (grasp point) over the bowl
    assert [e.seed for e in ev.episodes] == list(range(DEFAULT_SEED, DEFAULT_SEED + 20))
    # The video was rendered in a worker (no camera in the observations: the overhead view).
    assert (tmp_path / ev.episodes[0].video).is_file()
    # Same seeds in this process give bit-identical episodes.
    local = evaluate(expert_factory, BLIND, EvalConfig(episodes=3, workers=1))
    assert [(e.outcome, e.steps, e.max_lift_m) for e in local.episodes] == [
        (e.outcome, e.steps, e.max_lift_m) for e in ev.episodes[:3]
    ]


def test_random_policy_never_picks_up():
    policy = RandomPolicy(seed=0)
    ev = evaluate(
        policy,
        EnvSpec("so101_pick_place", cameras=(), max_steps=60),
        EvalConfig(episodes=8, workers=1, batch_envs=1),
    )
    assert ev.summary.successes == 0
    assert ev.summary.outcomes["never_picked_up"] == 8
    assert ev.summary.pick_rate == 0.0 and ev.summary.drop_rate is None
    assert policy.resets == 8


def test_an_evaluation_reports_a_sim_tasks_own_failure_classes():
    # The harness keeps what the env says of a failure (info["task_failure"]) through the rollout: it used
    # to keep only the pick-and-place signals, so `actlab eval --task so101_push` and the demo's report
    # named every push failure never_picked_up (and LeRobot's runtime, reading the env's own infos, did not).
    for task, outcome in (("so101_push", "never_touched"), ("so101_pick_moving", "carried_away")):
        home = HoldPolicy(np.degrees(HOME_QPOS))  # the arm holds its start pose
        ev = evaluate(home, EnvSpec(task, cameras=(), max_steps=150), EvalConfig(episodes=2, workers=1))
        assert [e.outcome for e in ev.episodes] == [outcome] * 2, task
        assert ev.summary.outcomes[outcome] == 2 and ev.summary.outcomes["never_picked_up"] == 0


def test_release_mid_transport_is_dropped_during_transport():
    factory = functools.partial(EarlyReleasePolicy, open_at=85)  # halfway between the cube and the bowl
    ev = evaluate(factory, BLIND, EvalConfig(episodes=4, workers=1), name="release85")
    assert [e.outcome for e in ev.episodes] == ["dropped_during_transport"] * 4
    assert all(e.picked and e.drop_events == 1 for e in ev.episodes)
    assert ev.summary.drop_rate == 1.0


def test_release_next_to_the_bowl_is_missed_goal_or_dropped():
    # Opened shortly before the bowl: depending on the cube position it falls beside the bowl (released
    # within two goal radii: missed_goal), short of it (dropped_during_transport) or into it (success).
    factory = functools.partial(EarlyReleasePolicy, open_at=97)
    ev = evaluate(factory, BLIND, EvalConfig(episodes=6, workers=1), name="release97")
    outcomes = [e.outcome for e in ev.episodes]
    assert set(outcomes) <= {"missed_goal", "dropped_during_transport", "success"}
    assert "missed_goal" in outcomes, outcomes
    for e in ev.episodes:
        if e.outcome == "missed_goal":
            assert e.picked and e.drop_events == 0  # released near the goal: not a drop


def test_videos_picked_after_the_run_show_each_kind_of_failure(tmp_path):
    # Released shortly before the bowl: a mix of missed_goal, dropped_during_transport and success.
    factory = functools.partial(EarlyReleasePolicy, open_at=97)
    cfg = EvalConfig(episodes=6, workers=1, videos=2, video_pick="failures", video_min_height=32)
    ev = evaluate(factory, BLIND, cfg, out_dir=tmp_path, name="release97")
    filmed = [e for e in ev.episodes if e.video]
    failures = [e for e in ev.episodes if not e.success]
    assert failures, [e.outcome for e in ev.episodes]
    first = {}
    for e in failures:
        first.setdefault(e.outcome, e.index)
    assert [e.index for e in filmed] == sorted(pick_video_episodes(ev.episodes, 2))
    assert sorted(first.values())[:2] == [e.index for e in filmed if not e.success][:2]
    for e in filmed:  # the video is this episode again: as many frames as steps, + 1 + the held end
        frames = read_video(tmp_path / e.video)
        assert len(frames) == e.steps + 1 + round(VIDEO_HOLD_S * 30)


def test_holding_the_cube_until_the_end_is_timeout():
    factory = functools.partial(FreezePolicy, freeze_at=95)
    ev = evaluate(
        factory, EnvSpec("so101_pick_place", cameras=(), max_steps=130), EvalConfig(episodes=2, workers=1)
    )
    assert [e.outcome for e in ev.episodes] == ["timeout", "timeout"]
    assert all(e.steps == 130 for e in ev.episodes)


_KILL_A_WORKER = """
import sys
import time
import psutil
from actlab.errors import ActlabError
from actlab.evaluation import EnvSpec, EvalConfig, run_eval
from actlab.evaluation.experts import expert_source

def wait_dead(proc):
    # Dead, but not reaped: reaping is the pool's job (a psutil wait() would hide the death from it).
    try:
        while proc.status() != psutil.STATUS_ZOMBIE:
            time.sleep(0.01)
    except psutil.NoSuchProcess:
        pass


def kill_one_worker(source, result):
    if not getattr(kill_one_worker, "done", False):
        kids = [p for p in psutil.Process().children() if "resource_tracker" not in " ".join(p.cmdline())]
        kids[-1].kill()  # SIGKILL, what the kernel's OOM killer does
        wait_dead(kids[-1])
        kill_one_worker.done = True
    kill_one_worker.seen = getattr(kill_one_worker, "seen", 0) + 1

try:
    # 40 whole expert episodes with a camera rendered (slower): plenty still to run when the first result
    # arrives and a worker is killed.
    run_eval([expert_source()], EnvSpec("so101_pick_place", image_size=32, cameras=("top",)),
             EvalConfig(episodes=40, workers=2), on_episode=kill_one_worker)
except ActlabError as e:
    print("ActlabError:", e.problem)
    sys.exit(3)
print("finished without error; results seen:", kill_one_worker.seen)
"""


def test_a_dead_rollout_worker_is_an_error_not_a_hang():
    from procs import run_python

    run = run_python(_KILL_A_WORKER, timeout=240)
    assert run.returncode == 3, (run.stdout, run.stderr[-2000:])
    assert "rollout worker process died" in run.stdout


def test_lockstep_batch_acts_like_separate_episodes_and_stops_finished_envs():
    """B envs with different step limits in one lockstep rollout: each ends at its own limit (a finished
    env is never stepped again nor recorded twice) and ends exactly where a B = 1 rollout of it ends."""
    from evalpolicies import RedSteerPolicy

    from actlab.evaluation.policy_io import ObsAdapter
    from actlab.evaluation.rollout import rollout
    from actlab.sim import make_env

    limits, seeds = (6, 11, 3), (4, 5, 6)

    def envs():
        return [make_env(image_size=32, cameras=("top",), max_steps=k) for k in limits]

    batch_envs, single_envs = envs(), envs()
    try:
        policy = RedSteerPolicy()
        traces = rollout(policy, batch_envs, seeds, ObsAdapter(None))
        assert policy.resets == 1 and policy.calls == max(limits)
        assert [t.steps for t in traces] == list(limits)
        for env, single, seed, trace in zip(batch_envs, single_envs, seeds, traces):
            (alone,) = rollout(RedSteerPolicy(), [single], [seed], ObsAdapter(None))
            assert alone.infos == trace.infos
            np.testing.assert_array_equal(env.joint_positions(), single.joint_positions())
            np.testing.assert_array_equal(env.get_state().physics, single.get_state().physics)
        finals = [env.joint_positions()[0] for env in batch_envs]
        assert len({round(float(f), 3) for f in finals}) == 3  # the rows really differ
    finally:
        for env in batch_envs + single_envs:
            env.close()
