"""Learning-rate schedules (framework/optim/schedulers.py) against hand computations: defaults,
each decay, past max_iters, a start at last_epoch, refused settings naming the key, and
torch's schedulers by name. (Warmup kinds: tests/test_optim.py.)"""

import math

import pytest
import torch
from test_optim import TwoNets, lrs_of

import framework  # noqa: F401  (fills the registries)
from framework.config import load_config
from framework.errors import ConfigError
from framework.optim.optimizers import build_optimizers
from framework.optim.schedulers import WarmupCosineLR, WarmupLR, WarmupMultiStepLR, WarmupPolyLR
from support import REPO

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


# ----------------------------------------------------------------------------- LinearDecayLR


@pytest.mark.parametrize("decay_start, max_iters, expected", [
    # an integer is an iteration: constant until 3, then 1 - (it - 3) / (6 - 3)
    (3, 6, [1, 1, 1, 1, 2 / 3, 1 / 3, 0]),
    # a fraction of the run: 0.5 x 6 = iteration 3, the same curve
    (0.5, 6, [1, 1, 1, 1, 2 / 3, 1 / 3, 0]),
    # floor(0.5 x 7) = 3: 1 - (it - 3) / 4
    (0.5, 7, [1, 1, 1, 1, 0.75, 0.5, 0.25, 0]),
    (0, 4, [1, 0.75, 0.5, 0.25, 0]),  # decay from the first iteration
    (3, 4, [1, 1, 1, 1, 0]),  # the last allowed start
    (0.999, 4, [1, 1, 1, 1, 0]),  # floor(3.996) = 3
    (0.001, 4, [1, 0.75, 0.5, 0.25, 0]),  # floor(0.004) = 0
])
def test_linear_decay_starts_at_an_iteration_or_a_fraction_of_the_run(decay_start, max_iters, expected):
    lrs = lrs_of({"type": "LinearDecayLR", "decay_start": decay_start}, max_iters + 1, max_iters=max_iters)
    assert lrs == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("decay_start, message", [
    (6, r"need 0 <= decay_start < max_iters, got decay_start 6 and max_iters 6 \(or a fraction of the run: "
        r"decay_start: 0\.5 decays over its second half\)"),
    (-1, "need 0 <= decay_start < max_iters, got decay_start -1"),
    (1.0, r"decay_start: a float is a fraction of the run, strictly between 0 and 1; got 1\.0 \(an iteration is an "
          r"integer: decay_start: 1\)"),
    (0.0, r"decay_start: a float is a fraction of the run, strictly between 0 and 1; got 0\.0"),
    (300.0, r"decay_start: a float is a fraction of the run, strictly between 0 and 1; got 300\.0 \(an iteration is an integer: decay_start: 300\)"),
    (True, "need 0 <= decay_start < max_iters, got decay_start True"),
])
def test_linear_decay_refuses_a_start_outside_the_run_naming_the_key(decay_start, message):
    with pytest.raises(ConfigError, match=r"^optim\.scheduler \(LinearDecayLR\): " + message):
        lrs_of({"type": "LinearDecayLR", "decay_start": decay_start}, 1, max_iters=6)


def test_a_shortened_cyclegan_run_with_a_fractional_decay_is_accepted():
    cfg = load_config(REPO / "projects/cyclegan/configs/cyclegan_shapes.yaml", [
        "train.max_iters=6", "optimizers.generators.scheduler.decay_start=0.5",
        "optimizers.discriminators.scheduler.decay_start=0.5"])
    assert lrs_of(dict(cfg.optimizers.generators.scheduler), 7, max_iters=cfg.train.max_iters) == pytest.approx(
        [1, 1, 1, 1, 2 / 3, 1 / 3, 0], abs=1e-12)


def resumed_lr(scheduler_node, trained_iters, old_max_iters, new_max_iters):
    """The learning rate right after loading a checkpoint taken at `trained_iters` of a run of
    `old_max_iters` into one of `new_max_iters` (what the first resumed iteration trains at),
    with the step that iteration takes: (lr, how far an SGD step with gradient 1 moved the weight)."""
    task = TwoNets()
    entry = {"optim": {"type": "SGD", "lr": 1.0, "scheduler": scheduler_node}}
    first = build_optimizers(entry, task, max_iters=old_max_iters)
    for _ in range(trained_iters):
        first.optimizers["main"].step()
        first.step_schedulers()
    resumed = build_optimizers(entry, task, max_iters=new_max_iters)
    resumed.load_state_dict(first.state_dict())
    weight = task.generator.bias
    before = weight.detach().clone()
    for p in task.parameters():
        p.grad = torch.ones_like(p)
    resumed.optimizers["main"].step()
    return resumed.lrs()["main"], (before - weight.detach())[0].item()


def test_a_longer_run_resumed_at_the_old_end_trains_its_first_iteration_at_the_new_schedules_lr():
    # WarmupPolyLR over 6 iterations is 0 at iteration 6; stretched to 10 it is (1 - 6/10)^0.9 there
    lr, moved = resumed_lr({"type": "WarmupPolyLR"}, 6, old_max_iters=6, new_max_iters=10)
    assert lr == pytest.approx(0.4 ** 0.9) and lr > 0
    assert moved == pytest.approx(0.4 ** 0.9)  # the step itself used it, not the checkpoint's lr 0


def test_a_fractional_linear_decay_stretches_with_the_run_on_resume():
    # 0.5 of 6: decaying from 3, lr 2/3 at 4; resumed into 12 iterations the decay starts at 6: lr 1 at 4
    lr, moved = resumed_lr({"type": "LinearDecayLR", "decay_start": 0.5}, 4, old_max_iters=6, new_max_iters=12)
    assert lr == 1.0 and moved == pytest.approx(1.0)
    lr, _ = resumed_lr({"type": "LinearDecayLR", "decay_start": 3}, 4, old_max_iters=6, new_max_iters=12)
    assert lr == pytest.approx(1 - 1 / 9)  # an iteration stays one: 1 - (4 - 3) / (12 - 3)
