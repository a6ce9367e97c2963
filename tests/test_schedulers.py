"""Learning-rate schedules (framework/optim/schedulers.py) against hand computations: defaults,
each decay, past max_iters, a start at last_epoch, refused settings naming the key, and
torch's schedulers by name. (Warmup kinds: tests/test_optim.py.)"""

import math

import pytest
import torch
from test_optim import lrs_of

import framework  # noqa: F401  (fills the registries)
from framework.errors import ConfigError
from framework.optim.schedulers import WarmupCosineLR, WarmupLR, WarmupMultiStepLR, WarmupPolyLR

DECAYS = {  # type -> (its required keywords, decay(it) by hand with its defaults, max_iters 10)
    "WarmupLR": ({}, lambda it: 1.0),
    "WarmupMultiStepLR": ({"milestones": [3, 6]}, lambda it: 0.1 ** ((it >= 3) + (it >= 6))),
    "WarmupCosineLR": ({}, lambda it: 0.5 * (1 + math.cos(math.pi * min(it / 10, 1.0)))),
    "WarmupPolyLR": ({}, lambda it: (1 - min(it / 10, 1.0)) ** 0.9),
}


@pytest.mark.parametrize("kind", DECAYS)
def test_defaults_no_warmup_and_the_documented_decay(kind):
    extra, decay = DECAYS[kind]
    lrs = lrs_of({"type": kind, **extra}, 12, base_lr=0.5)  # max_iters comes from the run (10)
    assert lrs == pytest.approx([0.5 * decay(it) for it in range(12)], abs=1e-12)


@pytest.mark.parametrize("kind", DECAYS)
def test_default_warmup_is_linear_from_a_thousandth(kind):
    extra, decay = DECAYS[kind]
    lrs = lrs_of({"type": kind, "warmup_iters": 4, **extra}, 5)
    assert lrs == pytest.approx([(0.001 + 0.999 * it / 4 if it < 4 else 1.0) * decay(it) for it in range(5)])


def test_cosine_and_poly_floor_at_min_lr_ratio_and_stay_there_past_max_iters():
    cosine = lrs_of({"type": "WarmupCosineLR", "min_lr_ratio": 0.2}, 14, max_iters=8)
    assert cosine == pytest.approx([0.2 + 0.8 * 0.5 * (1 + math.cos(math.pi * min(it / 8, 1))) for it in range(14)])
    poly = lrs_of({"type": "WarmupPolyLR", "power": 2.0, "min_lr_ratio": 0.05}, 14, max_iters=8)
    assert poly == pytest.approx([max((1 - min(it / 8, 1)) ** 2, 0.05) for it in range(14)])
    assert poly[8:] == pytest.approx([0.05] * 6) and cosine[8:] == pytest.approx([0.2] * 6)


@pytest.mark.parametrize("cls, extra", [(WarmupLR, {}), (WarmupMultiStepLR, {"milestones": [5]}),
                                        (WarmupCosineLR, {"max_iters": 10}), (WarmupPolyLR, {"max_iters": 10})])
def test_a_schedule_started_at_last_epoch_continues_the_curve(cls, extra):
    """torch's convention: constructing with last_epoch=k steps once, to iteration k + 1."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    optimizer.param_groups[0]["initial_lr"] = 1.0
    scheduler = cls(optimizer, **extra, warmup="linear", warmup_iters=4, warmup_factor=0.2, last_epoch=1)
    assert scheduler.last_epoch == 2
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.6 * scheduler.decay(2))


@pytest.mark.parametrize("settings, message", [
    ({"warmup": "cosine"}, r"warmup must be 'linear', 'constant' or null, got 'cosine'"),
    ({"warmup_iters": -1}, r"need warmup_iters >= 0 and 0 <= warmup_factor <= 1, got -1 and 0.001"),
    ({"warmup_factor": -0.1}, r"need warmup_iters >= 0 and 0 <= warmup_factor <= 1, got 0 and -0.1"),
    ({"warmup_factor": 1.01}, r"need warmup_iters >= 0 and 0 <= warmup_factor <= 1, got 0 and 1.01"),
])
def test_bad_warmup_settings_name_the_scheduler_key(settings, message):
    with pytest.raises(ConfigError, match=r"^optim\.scheduler \(WarmupLR\): " + message):
        lrs_of({"type": "WarmupLR", **settings}, 1)


@pytest.mark.parametrize("factor", [0.0, 1.0])
def test_warmup_factor_bounds_are_inclusive(factor):
    assert lrs_of({"type": "WarmupLR", "warmup_iters": 2, "warmup_factor": factor}, 3) == \
        pytest.approx([factor, (factor + 1) / 2, 1.0])


@pytest.mark.parametrize("node, message", [
    ({"warmup_iters": 3}, r"^optim\.scheduler: expected a scheduler node like \{type: WarmupPolyLR\}"),
    ("WarmupLR", r"^optim\.scheduler: expected a scheduler node"),
    ({"type": "WarmupPolyLRR"}, r"^optim\.scheduler\.type: unknown type 'WarmupPolyLRR'.*did you mean 'WarmupPolyLR'"),
    ({"type": "WarmupLR", "max_iters": 5}, r"^optim\.scheduler"),  # WarmupLR takes no max_iters
])
def test_bad_scheduler_nodes_name_the_key(node, message):
    with pytest.raises(ConfigError, match=message):
        lrs_of(node, 1)


def test_torch_schedulers_by_name_count_iterations_and_the_base_class_is_not_one():
    assert lrs_of({"type": "StepLR", "step_size": 2, "gamma": 0.5}, 5) == pytest.approx([1, 1, 0.5, 0.5, 0.25])
    assert lrs_of({"type": "OneCycleLR", "max_lr": 1.0, "total_steps": 4}, 1)[0] == pytest.approx(1.0 / 25)
    for name in ("LRScheduler", "_LRScheduler"):
        with pytest.raises(ConfigError, match=f"unknown type '{name}'"):
            lrs_of({"type": name}, 1)
