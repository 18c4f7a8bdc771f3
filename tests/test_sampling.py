"""(lr, wd) sampling: seeded, reproducible, log-uniform inside the box, paired across models."""

from __future__ import annotations

import math

import numpy as np
import pytest

from optbench.plan.sampling import sample_pairs
from optbench.spec.schema import Range, Search

BOX = Range(lr=(1e-4, 1e-2), wd=(1e-3, 1.0))


def _search(**kw) -> Search:
    return Search(n_samples=kw.pop("n_samples", 8), ranges={"adamw": BOX}, **kw)


@pytest.mark.parametrize("sampler", ["random", "qmc"])
def test_same_settings_same_pairs_and_prefix_stable(sampler):
    s = _search(sampler=sampler)
    first = sample_pairs(s, BOX, "adamw", 8)
    assert first == sample_pairs(s, BOX, "adamw", 8)
    assert sample_pairs(s, BOX, "adamw", 16)[:8] == first  # growing n keeps the old pairs
    assert sample_pairs(_search(sampler=sampler, seed=1), BOX, "adamw", 8) != first
    assert sample_pairs(s, BOX, "sgd", 8) != first  # a stream per optimizer


@pytest.mark.parametrize("sampler", ["random", "qmc"])
def test_pairs_are_log_uniform_in_the_box(sampler):
    pairs = np.array(sample_pairs(_search(sampler=sampler, n_samples=256), BOX, "adamw", 256))
    assert (pairs[:, 0] >= 1e-4).all() and (pairs[:, 0] <= 1e-2).all()
    assert (pairs[:, 1] >= 1e-3).all() and (pairs[:, 1] <= 1.0).all()
    u = (np.log(pairs[:, 0]) - math.log(1e-4)) / (math.log(1e-2) - math.log(1e-4))
    # log-uniform: each quarter of the log range gets about a quarter of the draws
    counts = np.histogram(u, bins=4, range=(0, 1))[0]
    assert counts.min() > 256 / 4 * 0.6


def test_models_with_other_boxes_get_the_same_relative_position():
    s = _search()
    scaled = Range(lr=(1e-3, 1e-1), wd=BOX.wd)
    a, b = sample_pairs(s, BOX, "adamw", 4), sample_pairs(s, scaled, "adamw", 4)
    for (lr_a, wd_a), (lr_b, wd_b) in zip(a, b, strict=True):
        assert lr_b == pytest.approx(10 * lr_a)
        assert wd_b == pytest.approx(wd_a)


def test_good_sampler_trains_exactly_the_good_value():
    from optbench.plan.sampling import study_pairs
    from optbench.spec.schema import GoodValue

    s = Search(
        n_samples=1, sampler="good", good_values={"m": {"sgd": GoodValue(lr=1.9, wd=1.3e-5)}}
    )
    assert study_pairs(s, "m", "sgd") == [(1.9, 1.3e-5)]
