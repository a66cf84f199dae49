"""Index math alone: windows, episode borders, subsets, the sampler's determinism, resume and DDP shares."""

from __future__ import annotations

import numpy as np
import pytest

from actlab.datasets.sampler import (
    EpisodeSampler,
    delta_timestamps_to_indices,
    parse_episodes,
    select_ranges,
    window_indices,
)
from actlab.errors import ActlabError


def test_window_at_episode_end_matches_lerobot_example():
    # LeRobot clamps to the episode: last frame of a 40-frame episode, offsets 0..4 -> rows [39]*5,
    # pad [F,T,T,T,T].
    rows, pad = window_indices(np.array([39]), np.arange(5), np.array([0]), np.array([40]))
    assert rows.tolist() == [[39, 39, 39, 39, 39]]
    assert pad.tolist() == [[False, True, True, True, True]]


def test_window_at_episode_start_and_inside():
    idx = np.array([40, 45, 79])
    rows, pad = window_indices(idx, np.array([-2, 0, 1]), np.array([40, 40, 40]), np.array([80, 80, 80]))
    assert rows.tolist() == [[40, 40, 41], [43, 45, 46], [77, 79, 79]]
    assert pad.tolist() == [[True, False, False], [False, False, False], [False, False, True]]


def test_delta_timestamps_to_indices():
    assert delta_timestamps_to_indices({"action": [0, 1 / 30, 2 / 30], "s": [-0.1]}, 30) == {
        "action": [0, 1, 2],
        "s": [-3],
    }
    with pytest.raises(ActlabError, match="multiple of 1/fps"):
        delta_timestamps_to_indices({"action": [0.01]}, 30)


def test_parse_episodes():
    assert parse_episodes("0,3,5") == [0, 3, 5]
    assert parse_episodes("0-2, 7") == [0, 1, 2, 7]
    assert parse_episodes(None) is None
    with pytest.raises(ActlabError):
        parse_episodes("a,b")


def test_select_ranges_episodes_and_max_samples():
    starts, stops, ids = [0, 40, 80], [40, 80, 120], [0, 1, 2]
    s, e = select_ranges(starts, stops, ids, episodes=[0, 2])
    assert s.tolist() == [0, 80] and e.tolist() == [40, 120]
    s, e = select_ranges(starts, stops, ids, max_samples=50)
    assert s.tolist() == [0, 40] and e.tolist() == [40, 50]
    s, e = select_ranges(starts, stops, ids, episodes=[2, 0], max_samples=45)
    assert s.tolist() == [80, 0] and e.tolist() == [120, 5]
    with pytest.raises(ActlabError, match="episode not in dataset"):
        select_ranges(starts, stops, ids, episodes=[5])


def _epoch(sampler: EpisodeSampler) -> np.ndarray:
    return sampler.next_batch(len(sampler))


def test_sampler_covers_each_frame_once_per_epoch_and_only_selected_ranges():
    s = EpisodeSampler([0, 80], [40, 100], seed=3)
    a, b = _epoch(s), _epoch(s)
    expected = list(range(0, 40)) + list(range(80, 100))
    assert sorted(a.tolist()) == expected and sorted(b.tolist()) == expected
    assert not np.array_equal(a, b)  # reshuffled every epoch
    unshuffled = EpisodeSampler([0, 80], [40, 100], seed=3, shuffle=False)
    assert _epoch(unshuffled).tolist() == expected


def test_sampler_is_deterministic_and_resumes_mid_epoch_exactly():
    a = EpisodeSampler([0, 40], [40, 90], seed=7)
    b = EpisodeSampler([0, 40], [40, 90], seed=7)
    for _ in range(5):
        assert np.array_equal(a.next_batch(8), b.next_batch(8))
    state = a.state_dict()
    expected = [a.next_batch(8) for _ in range(20)]  # crosses epoch borders
    c = EpisodeSampler([0, 40], [40, 90], seed=7)
    c.load_state_dict(state)
    assert all(np.array_equal(x, c.next_batch(8)) for x in expected)
    other_seed = EpisodeSampler([0, 40], [40, 90], seed=8)
    with pytest.raises(ActlabError, match="does not match"):
        other_seed.load_state_dict(state)


def test_ddp_ranks_get_disjoint_equal_shares():
    shares = [EpisodeSampler([0], [103], seed=1, rank=r, world_size=4) for r in range(4)]
    epochs = [_epoch(s) for s in shares]
    assert {len(e) for e in epochs} == {103 // 4}
    union = np.concatenate(epochs)
    assert len(np.unique(union)) == len(union)
    with pytest.raises(ActlabError):
        EpisodeSampler([0], [10], seed=1, rank=4, world_size=4)


def test_an_episode_range_backwards_or_past_any_dataset_is_refused():
    """`--drop-episodes 5-3` selected nothing without a word (curate dropped no episode, exit 0), and
    `0-99999999` built a list of 10^8 indices for minutes before the dataset was read."""
    from actlab.datasets.sampler import MAX_EPISODE_INDEX

    with pytest.raises(ActlabError, match="backwards") as e:
        parse_episodes("0,5-3", "--drop-episodes")
    assert e.value.field == "--drop-episodes" and "write it as 3-5" in str(e.value)
    with pytest.raises(ActlabError, match="reaches past any dataset"):
        parse_episodes(f"0-{MAX_EPISODE_INDEX + 1}")
    assert parse_episodes("3-3,7") == [3, 7]
