import dataclasses

import pytest

from actlab.errors import ActlabError
from actlab.utils.config import apply_overrides, field_docs, flatten, from_dict, to_dict


@dataclasses.dataclass(frozen=True)
class Inner:
    # number of layers
    layers: int = 2
    sizes: tuple[int, ...] = (1, 2)
    name: str | None = None

    def __post_init__(self):
        if self.layers < 1:
            raise ValueError("layers must be >= 1")


@dataclasses.dataclass(frozen=True)
class Outer:
    lr: float = 1e-3  # learning rate
    inner: Inner = dataclasses.field(default_factory=Inner)
    flag: bool = False


def test_round_trip_and_overrides():
    cfg = Outer()
    assert from_dict(Outer, to_dict(cfg)) == cfg
    overrides = ["lr=0.5", "inner.layers=4", "inner.sizes=[3,4]", "flag=true", "inner.name=x"]
    cfg2 = apply_overrides(cfg, overrides)
    assert cfg2 == Outer(lr=0.5, inner=Inner(layers=4, sizes=(3, 4), name="x"), flag=True)
    assert flatten(cfg2)["inner.layers"] == 4


def test_unknown_key_has_did_you_mean():
    with pytest.raises(ActlabError, match="did you mean 'inner.layers'"):
        apply_overrides(Outer(), ["inner.layer=3"])
    with pytest.raises(ActlabError, match="did you mean"):
        from_dict(Outer, {"lrr": 1.0})


def test_invalid_value_is_reported():
    with pytest.raises(ActlabError, match="inner.layers"):
        apply_overrides(Outer(), ["inner.layers=0"])
    with pytest.raises(ActlabError, match="cannot read"):
        apply_overrides(Outer(), ["inner.layers=abc"])


def test_field_docs():
    assert field_docs(Outer)["lr"] == "learning rate"
    assert field_docs(Inner)["layers"] == "number of layers"


@dataclasses.dataclass(frozen=True)
class Chunking:
    # predicted actions per query
    chunk_size: int = 100
    n_action_steps: int = 100

    def __post_init__(self):
        if self.n_action_steps > self.chunk_size:
            raise ValueError("n_action_steps must be <= chunk_size")


@dataclasses.dataclass(frozen=True)
class Relative(Chunking):
    # extra field of the subclass
    delay: int = 0


@dataclasses.dataclass(frozen=True)
class WithChunking:
    policy: Chunking = dataclasses.field(default_factory=Chunking)


def test_overrides_that_only_fit_together_work_in_any_order():
    for order in (["policy.chunk_size=50", "policy.n_action_steps=50"],
                  ["policy.n_action_steps=50", "policy.chunk_size=50"]):  # fmt: skip
        assert apply_overrides(WithChunking(), order).policy == Chunking(50, 50)
    assert apply_overrides(Outer(), ["lr=1", "lr=2"]).lr == 2.0  # the later one wins
    with pytest.raises(ActlabError, match="policy.n_action_steps"):
        apply_overrides(WithChunking(), ["policy.n_action_steps=200"])


def test_field_docs_include_inherited_fields():
    docs = field_docs(Relative)
    assert docs["chunk_size"] == "predicted actions per query"
    assert docs["delay"] == "extra field of the subclass"


@dataclasses.dataclass(frozen=True)
class Pair:
    betas: tuple[float, float] = (0.9, 0.999)


def test_fixed_length_tuple_round_trip():
    assert from_dict(Pair, {"betas": [0.5, 0.25]}) == Pair((0.5, 0.25))
    assert apply_overrides(Pair(), ["betas=[0.1,0.2]"]).betas == (0.1, 0.2)
