"""Stats: absolute vs numpy, image stats in [0, 1], relative actions and state deltas vs brute force."""

from __future__ import annotations

import json

import numpy as np
import pytest

from actlab.datasets import compute_stats, load_stats, open_dataset, save_stats
from actlab.datasets.stats import aggregate_stats, feature_stats
from actlab.errors import ActlabError


@pytest.fixture(scope="module")
def ds(tiny_dataset):
    return open_dataset(tiny_dataset)


def test_absolute_and_image_stats(ds, tmp_path):
    stats = compute_stats(ds, cache_dir=tmp_path)
    action = ds.column("action").astype(np.float64)
    assert np.allclose(stats["action"]["mean"], action.mean(0))
    assert np.allclose(stats["action"]["std"], action.std(0))
    assert np.allclose(stats["action"]["q50"], np.quantile(action, 0.5, axis=0))
    img = stats["observation.images.top"]
    assert img["mean"].shape == (3, 1, 1) and img["std"].shape == (3, 1, 1)
    assert (img["min"] >= 0).all() and (img["max"] <= 1).all() and (img["std"] > 0.05).all()


def test_written_stats_json_agrees_with_compute_stats(ds, tmp_path):
    written = load_stats(ds.root / "meta/stats.json")
    computed = compute_stats(ds, cache_dir=tmp_path)
    for key in ("observation.state", "action"):
        for s in ("mean", "std", "min", "max"):
            assert np.allclose(written[key][s], computed[key][s], atol=1e-6), (key, s)
    # Image stats: per-episode subsample aggregated at write time vs a global subsample: close.
    assert np.allclose(
        written["observation.images.top"]["mean"], computed["observation.images.top"]["mean"], atol=0.02
    )


def _brute_relative(ds, horizon, absdims=()):
    action, state = ds.column("action").astype(np.float64), ds.column("observation.state").astype(np.float64)
    per_step = [[] for _ in range(horizon)]
    for i in range(len(ds)):
        item = ds.get_item(i, {"action": list(range(horizon))})
        for k in range(horizon):
            if item["action_is_pad"][k]:
                continue
            rel = item["action"][k].astype(np.float64) - state[i]
            rel[list(absdims)] = item["action"][k][list(absdims)]
            per_step[k].append(rel)
    del action
    return per_step


def test_relative_action_stats_match_brute_force(ds, tmp_path):
    h = 8
    stats = compute_stats(ds, relative_action_horizon=h, absolute_action_dims=(5,), cache_dir=tmp_path)
    rel = stats["action.relative"]
    per_step = _brute_relative(ds, h, absdims=(5,))
    pooled = np.concatenate([np.stack(p) for p in per_step])
    assert int(rel["count"][0]) == len(pooled) == sum(e.length - k for e in ds.episodes for k in range(h))
    assert np.allclose(rel["mean"], pooled.mean(0))
    assert np.allclose(rel["std"], np.maximum(pooled.std(0), rel["std_floor"]))
    assert rel["mean_per_step"].shape == (h, 6)
    for k in (0, h - 1):
        assert np.allclose(rel["mean_per_step"][k], np.stack(per_step[k]).mean(0))
    # The gripper dim (5) keeps absolute values: its mean is the action mean over the same positions.
    assert abs(rel["mean"][5] - pooled[:, 5].mean()) < 1e-9
    assert not np.allclose(rel["mean"][:5], stats["action"]["mean"][:5], atol=1e-3)


def test_std_floor_applies_to_still_joints(make_dataset, tmp_path):
    ds = open_dataset(make_dataset(tmp_path, episodes=2, length=20))
    stats = compute_stats(ds, relative_action_horizon=1, cache_dir=tmp_path / "c", std_floor_frac=0.5)
    rel = stats["action.relative"]
    action = stats["action"]
    expected_floor = np.maximum(0.5 * (action["max"] - action["min"]), 1e-3)
    assert np.allclose(rel["std_floor"], expected_floor)
    assert (rel["std"] >= expected_floor - 1e-12).all() and (
        rel["std_per_step"] >= expected_floor - 1e-12
    ).all()


def test_state_delta_stats(ds, tmp_path):
    n = 4
    stats = compute_stats(ds, state_delta_frames=n, cache_dir=tmp_path)
    state = ds.column("observation.state").astype(np.float64)
    deltas = [state[i] - state[i - n] for e in ds.episodes for i in range(e.start + n, e.stop)]
    assert int(stats["observation.state.delta"]["count"][0]) == len(deltas)
    assert np.allclose(stats["observation.state.delta"]["mean"], np.mean(deltas, axis=0))


def test_stats_are_cached_and_saved_as_json(ds, tmp_path):
    first = compute_stats(ds, relative_action_horizon=4, cache_dir=tmp_path)
    assert len(list(tmp_path.glob("*.json"))) == 1
    second = compute_stats(ds, relative_action_horizon=4, cache_dir=tmp_path)
    assert np.array_equal(first["action.relative"]["std_per_step"], second["action.relative"]["std_per_step"])
    save_stats(first, tmp_path / "out.json")
    assert json.loads((tmp_path / "out.json").read_text())["observation.images.top"]["mean"][0] == [
        [pytest.approx(float(first["observation.images.top"]["mean"][0, 0, 0]))]
    ]


def test_relative_needs_matching_dims(make_dataset, tmp_path):
    ds = open_dataset(make_dataset(tmp_path, episodes=1, length=10, state_dim=4, action_dim=3))
    with pytest.raises(ActlabError, match="same space"):
        compute_stats(ds, relative_action_horizon=2, cache_dir=tmp_path / "c")


def test_aggregate_matches_pooled():
    rng = np.random.default_rng(0)
    parts = [rng.normal(i, 1 + i, size=(50 + 10 * i, 3)) for i in range(3)]
    agg = aggregate_stats([feature_stats(p) for p in parts])
    allv = np.concatenate(parts)
    assert np.allclose(agg["mean"], allv.mean(0)) and np.allclose(agg["std"], allv.std(0))
    assert agg["count"][0] == len(allv)


def test_stats_cache_follows_the_source_files(tiny_dataset, tmp_path, monkeypatch):
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    import actlab.datasets.stats as stats_mod

    root = shutil.copytree(tiny_dataset, tmp_path / "copy")
    cache = tmp_path / "cache"
    first = compute_stats(open_dataset(root), cache_dir=cache)

    def no_recompute(*args, **kwargs):
        raise AssertionError("stats recomputed for an unchanged dataset")

    with monkeypatch.context() as m:  # unchanged files (reopened): served from the cache
        m.setattr(stats_mod, "feature_stats", no_recompute)
        again = compute_stats(open_dataset(root), cache_dir=cache)
    assert np.array_equal(again["action"]["mean"], first["action"]["mean"])
    # Rewrite the actions (+1): the data file changes, so the stats must be recomputed. An edit on
    # purpose: the writer's content checksums, which would call it damage, go with it.
    (root / "meta/actlab_checksums.json").unlink()
    path = root / "data/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    i = table.column_names.index("action")
    flat = np.asarray(table.column(i).combine_chunks().flatten()) + 1.0
    shifted = pa.FixedSizeListArray.from_arrays(pa.array(flat, pa.float32()), 6)
    pq.write_table(table.set_column(i, table.schema.field(i), shifted), path, row_group_size=40)
    changed = compute_stats(open_dataset(root), cache_dir=cache)
    assert np.allclose(changed["action"]["mean"], first["action"]["mean"] + 1.0, atol=1e-5)
    assert len(list(cache.glob("*.json"))) == 2


def test_image_stats_cache_is_keyed_by_the_image_source(make_dataset, tmp_path):
    from actlab.datasets import FrameStore

    ds = open_dataset(make_dataset(tmp_path, episodes=2, length=12, cameras={"side": (24, 48)}))
    store = FrameStore.build(ds, image_size=16, cache_dir=tmp_path / "fs", progress=False)  # black bars
    key = "observation.images.side"
    cache = tmp_path / "cache"
    native = compute_stats(ds, cache_dir=cache)[key]["mean"]
    padded = compute_stats(ds, store=store, cache_dir=cache)[key]["mean"]
    direct = compute_stats(ds, store=store, use_cache=False)[key]["mean"]
    assert np.array_equal(padded, direct)  # not the native stats served from the cache
    assert (padded < native).all()


@pytest.mark.parametrize(
    "kwargs", [{"state_delta_frames": 0}, {"state_delta_frames": -3}, {"image_samples": 0}]
)
def test_bad_stats_arguments_are_refused(ds, tmp_path, kwargs):
    with pytest.raises(ActlabError, match=">= 1") as e:
        compute_stats(ds, cache_dir=tmp_path, **kwargs)
    assert e.value.field == next(iter(kwargs))
