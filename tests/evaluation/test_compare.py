"""``actlab eval compare A B``: per-seed agreement, the paired difference and its interval, McNemar's exact
test and Connor's sample size, checked against hand computations on hand-built records and on the
results.json files real ``actlab eval`` runs write (the scripted expert and an untrained bundle)."""

from __future__ import annotations

import json

import pytest

from actlab.cli import main
from actlab.errors import ActlabError
from actlab.evaluation.compare import compare, episodes_needed, load_outcomes, paired_interval

SEED = 100_000


def _results(path, outcomes, name="policy", extra=()):
    """A results.json as actlab eval writes it (the fields compare reads), one checkpoint per entry."""
    ckpts = [
        {"name": n, "episodes": [{"index": i, "seed": SEED + i, "success": bool(s)} for i, s in enumerate(o)]}
        for n, o in [(name, outcomes), *extra]
    ]
    path.mkdir(parents=True, exist_ok=True)
    (path / "results.json").write_text(json.dumps({"checkpoints": ckpts}))
    return path


# 20 seeds: 6 both solved, 4 both failed, 9 only A, 1 only B (the seed at index 19).
A = [1] * 6 + [0] * 4 + [1] * 9 + [0]
B = [1] * 6 + [0] * 4 + [0] * 9 + [1]


@pytest.mark.timeout(30)
def test_a_hand_computed_comparison(tmp_path, capsys):
    a, b = _results(tmp_path / "a", A), _results(tmp_path / "b", B)
    r = compare(load_outcomes(a), load_outcomes(b))
    assert load_outcomes(b / "results.json").success == load_outcomes(b).success
    assert (r["n"], r["both_solved"], r["both_failed"], r["only_a"], r["only_b"]) == (20, 6, 4, 9, 1)
    assert r["seeds_only_b"] == [SEED + 19] and r["seeds_only_a"] == list(range(SEED + 10, SEED + 19))
    assert r["agreement"] == pytest.approx(0.5) and r["difference"] == pytest.approx(-0.4)
    # McNemar exact by hand: 2 * (C(10,0) + C(10,1)) / 2^10 = 22 / 1024
    assert r["p"] == pytest.approx(22 / 1024) and r["verdict"] == "worse"
    # Agresti-Min by hand: n' = 22, b' = 1.5/22, c' = 9.5/22, d = -8/22, se = sqrt((11/22 - d^2) / 22)
    assert (r["ci_low"], r["ci_high"]) == pytest.approx((-0.617047, -0.110226), abs=1e-6)
    # Connor: psi 0.5, delta -0.4: (1.959964 sqrt(0.5) + 0.841621 sqrt(0.34))^2 / 0.16 = 22.011 -> 23
    assert r["episodes_needed"] == 23

    assert main(["eval", "compare", str(a), str(b)]) == 0
    text = capsys.readouterr().out
    assert "6 both solved, 4 both failed; 9 only A, 1 only B" in text
    assert "-40.0 points, 95% interval [-61.7, -11.0]" in text
    assert "p = 0.0215 < 0.05: B worse than A" in text and ": 23 (this comparison ran 20)" in text
    assert main(["eval", "compare", str(a), str(b), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(r))


@pytest.mark.timeout(30)
def test_no_difference_needs_no_sample_size_and_small_counts():
    assert episodes_needed(20, 3, 3) is None and episodes_needed(0, 0, 0) is None
    # no discordant seed: b' = c' = 0.5/22, d = 0, half = 1.959964 sqrt((1/22) / 22) = 0.0891
    assert paired_interval(20, 0, 0) == pytest.approx((-0.0891, 0.0891), abs=1e-4)
    # 1 of 10 seeds gained: psi = delta = 0.1: (1.959964 sqrt(0.1) + 0.841621 sqrt(0.09))^2 / 0.01 = 76.09
    assert episodes_needed(10, 1, 0) == 77  # (the exact test's floor: 6 / 0.1 = 60)
    assert episodes_needed(10, 10, 0) == 6 and episodes_needed(10, 10, 0, alpha=0.01) == 8  # 2/2^8 < 0.01


@pytest.mark.timeout(30)
def test_different_seeds_are_refused_naming_them(tmp_path, capsys):
    a = _results(tmp_path / "a", [1] * 8)
    b = tmp_path / "b"
    b.mkdir()
    eps = [{"seed": SEED + 2 + i, "success": True} for i in range(8)]  # seeds 2..9: 0, 1 only in A
    (b / "results.json").write_text(json.dumps({"checkpoints": [{"name": "p", "episodes": eps}]}))
    with pytest.raises(ActlabError, match="different seeds") as e:
        compare(load_outcomes(a), load_outcomes(b))
    found = e.value.found
    assert f"only in A ({a}): 2 seed(s): {SEED}, {SEED + 1};" in found
    assert f"only in B ({b}): 2 seed(s): {SEED + 8}, {SEED + 9}" in found
    assert main(["eval", "compare", str(a), str(b)]) == 2
    assert "--seed and --episodes" in capsys.readouterr().err


@pytest.mark.timeout(30)
def test_many_differing_seeds_are_counted(tmp_path):
    a = _results(tmp_path / "a", [1] * 30)
    b = tmp_path / "b"
    b.mkdir()
    eps = [{"seed": SEED + 1000 + i, "success": True} for i in range(30)]
    (b / "results.json").write_text(json.dumps({"checkpoints": [{"name": "p", "episodes": eps}]}))
    with pytest.raises(ActlabError) as e:
        compare(load_outcomes(a), load_outcomes(b))
    assert f"30 seed(s): {SEED}, {SEED + 1}, {SEED + 2}, {SEED + 3}, {SEED + 4} and 25 more" in e.value.found


@pytest.mark.timeout(30)
def test_a_checkpoint_of_a_sweep_is_named_with_a_hash(tmp_path):
    a = _results(tmp_path / "a", A, name="step_10", extra=[("step_20", B)])
    with pytest.raises(ActlabError, match="holds 2 checkpoints") as e:
        load_outcomes(a)
    assert "step_10, step_20" in e.value.expected and e.value.fix.endswith("#step_20")
    assert load_outcomes(f"{a}#step_20").success[SEED + 19] is True
    with pytest.raises(ActlabError, match="no checkpoint 'step_30'"):
        load_outcomes(f"{a}#step_30")
    with pytest.raises(ActlabError, match="not an evaluation directory"):
        load_outcomes(tmp_path)
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ActlabError, match="not valid JSON"):
        load_outcomes(tmp_path / "bad.json")


@pytest.mark.timeout(170)
def test_real_evaluations_the_expert_against_an_untrained_bundle(tmp_path, capsys):
    """Two real ``actlab eval --out`` runs on the same 4 seeds: the scripted expert solves all, the
    untrained bundle none, so b = 0, c = 4: p = 2 / 2^4 = 0.125 (no evidence at 4 episodes), difference
    -100 points; Connor's size for psi = delta = 1 is (1.959964 + 0)^2 / 1 = 3.84 -> 4, below the 6
    discordant seeds the exact test needs at alpha 0.05, so 6."""
    pytest.importorskip("mujoco")
    from evalpolicies import tiny_rel_bundle  # the untrained act_relative bundle the real-time tests use

    bundle = tiny_rel_bundle(tmp_path / "bundle")
    common = ["--episodes", "4", "--workers", "1", "--batch-envs", "2", "--threads", "1"]
    assert main(["eval", "--expert", *common, "--out", str(tmp_path / "expert")]) == 0
    assert main(["eval", str(bundle), *common, "--max-steps", "20", "--out", str(tmp_path / "rel")]) == 0
    capsys.readouterr()
    assert main(["eval", "compare", str(tmp_path / "expert"), str(tmp_path / "rel"), "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert (r["n"], r["a"]["successes"], r["b"]["successes"], r["only_a"], r["only_b"]) == (4, 4, 0, 4, 0)
    assert r["p"] == pytest.approx(0.125) and r["verdict"] == "no evidence"
    # Connor asks for 4, but the exact test needs 6 discordant seeds to reach p < 0.05 (2 / 2^6 = 0.031)
    assert r["difference"] == -1.0 and r["episodes_needed"] == 6
    assert r["seeds_only_a"] == [SEED, SEED + 1, SEED + 2, SEED + 3]
    # the same comparison from the other side: B better, the interval mirrored
    back = compare(load_outcomes(tmp_path / "rel"), load_outcomes(tmp_path / "expert" / "results.json"))
    assert back["difference"] == 1.0 and (back["ci_low"], back["ci_high"]) == pytest.approx(
        (-r["ci_high"], -r["ci_low"])
    )
