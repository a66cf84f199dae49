import dataclasses

import pytest

from actlab.errors import ActlabError
from actlab.training.config import DataConfig
from actlab.training.data import overfit_ranges, split_episodes


@dataclasses.dataclass
class Ep:
    index: int
    start: int
    stop: int


EPISODES = [Ep(i, 10 * i, 10 * i + 10) for i in range(10)]


def test_split_is_by_episode_and_disjoint():
    s = split_episodes(EPISODES, DataConfig(val_fraction=0.2), seed=3)
    assert len(s.val_episodes) == 2 and len(s.train_episodes) == 8
    assert not set(s.val_episodes) & set(s.train_episodes)
    train_frames = {f for a, b in s.train_ranges for f in range(a, b)}
    val_frames = {f for a, b in s.val_ranges for f in range(a, b)}
    assert not train_frames & val_frames
    assert len(train_frames | val_frames) == 100
    # the same seed gives the same split; another seed another one
    assert split_episodes(EPISODES, DataConfig(val_fraction=0.2), seed=3) == s
    assert split_episodes(EPISODES, DataConfig(val_fraction=0.2), seed=4).val_episodes != s.val_episodes


def test_small_fractions_still_hold_out_one_episode_and_keep_one():
    s = split_episodes(EPISODES[:2], DataConfig(val_fraction=0.01), seed=0)
    assert len(s.val_episodes) == 1 and len(s.train_episodes) == 1
    with pytest.warns(UserWarning, match="a split needs 2"):  # said, not dropped without a word
        s = split_episodes(EPISODES[:1], DataConfig(val_fraction=0.5), seed=0)
    assert s.val_episodes == () and s.train_frames == 10
    assert split_episodes(EPISODES, DataConfig(val_fraction=0.0), seed=0).val_ranges == ()


def test_episode_subset_and_max_samples():
    s = split_episodes(EPISODES, DataConfig(episodes=(1, 2, 3), val_fraction=0.0, max_samples=25), seed=0)
    assert s.train_episodes == (1, 2, 3)
    assert s.train_ranges == ((10, 20), (20, 30), (30, 35))
    with pytest.raises(ActlabError, match="data.episodes"):
        split_episodes(EPISODES, DataConfig(episodes=(42,)), seed=0)


def test_overfit_ranges_are_fixed_single_frames():
    r = overfit_ranges([(0, 10), (20, 30)], 8, seed=1)
    assert len(r) == 8 and all(b == a + 1 for a, b in r)
    assert all(0 <= a < 10 or 20 <= a < 30 for a, _ in r)
    assert r == overfit_ranges([(0, 10), (20, 30)], 8, seed=1)
    with pytest.raises(ActlabError, match="overfit"):
        overfit_ranges([(0, 4)], 8, seed=1)


def test_given_held_out_episodes_replace_the_seeded_draw():
    s = split_episodes(EPISODES, DataConfig(val_fraction=0.2), seed=3, held_out=(1, 7, 8))
    assert s.val_episodes == (1, 7, 8) and set(s.train_episodes) == set(range(10)) - {1, 7, 8}
    # no validation asked for, an episodes list, or nothing left to train on: the seeded rule as before
    assert split_episodes(EPISODES, DataConfig(val_fraction=0.0), seed=3, held_out=(1,)).val_episodes == ()
    picked = DataConfig(val_fraction=0.2, episodes=[0, 1, 2, 3])
    assert split_episodes(EPISODES, picked, seed=3, held_out=(1,)) == split_episodes(EPISODES, picked, seed=3)
    every = tuple(range(10))
    plain = split_episodes(EPISODES, DataConfig(val_fraction=0.2), seed=3)
    assert split_episodes(EPISODES, DataConfig(val_fraction=0.2), seed=3, held_out=every) == plain


@pytest.mark.timeout(300)
def test_a_fine_tune_on_its_bases_dataset_keeps_the_bases_held_out_episodes(make_dataset, tmp_path, capsys):
    """A fine-tune (--init-from) drew its validation episodes with its own seed: on the base's own dataset
    it validated on episodes the base trained on and trained on ones the base never saw (four correction
    heads on one frozen policy, seeds 0-3, held out four different sets). Now it keeps the base's, and says
    so; on another dataset it draws its own, as before."""
    import json

    from actlab.cli import main

    data = make_dataset(tmp_path / "d", episodes=8, length=20)
    other = make_dataset(tmp_path / "o", episodes=8, length=20, seed=5)
    tiny = ["--preset", "tiny", "--set", "log.progress=false", "--set", "steps=2"]
    tiny += ["--set", "checkpoint.every=2"]

    def held(run):
        meta = json.loads((run / "checkpoints" / "step_0000002" / "actlab.json").read_text())
        return meta["extra"]["train"]["val_episodes"]

    assert main(["train", *tiny, "--dataset", str(data), "--out", str(tmp_path / "base")]) == 0
    base = held(tmp_path / "base")
    ckpt = str(tmp_path / "base" / "checkpoints" / "step_0000002")
    capsys.readouterr()
    for seed in ("1", "2"):
        out = tmp_path / f"ft{seed}"
        argv = ["train", *tiny, "--dataset", str(data), "--init-from", ckpt, "--set", f"seed={seed}"]
        assert main([*argv, "--out", str(out)]) == 0
        assert held(out) == base
        assert f"validating on the {len(base)} episodes" in capsys.readouterr().err
    draws = set()
    for seed in ("1", "2", "3"):
        out = tmp_path / f"other{seed}"
        argv = ["train", *tiny, "--dataset", str(other), "--init-from", ckpt, "--set", f"seed={seed}"]
        assert main([*argv, "--out", str(out)]) == 0
        assert "validating on the" not in capsys.readouterr().err
        draws.add(tuple(held(out)))
    assert len(draws) > 1  # another dataset: each seed draws its own
