"""The synthesis recipe against the official OASIS / SPADE / MSGAN code (docs/semantic-synthesis.md,
"Fidelity to the official code"): what a loss that reads labels refuses, the mode-seeking term's
two forms and its bound, fresh noise for the generator's step, and the EMA generator's BatchNorm
statistics re-estimated before it is evaluated, saved or exported. KID and FID's rounding:
tests/test_kid.py."""

import copy

import pytest
import torch
from test_synthesis_task import (
    CLASSES,
    batch,
    generator,
    patch_discriminator,
    segmenter_discriminator,
    sgd,
    whole_and_halves_alike,
)

import framework  # noqa: F401  (fills the registries)
from framework.errors import ConfigError
from framework.losses.mode_seeking import mode_seeking_loss, spread_ratios
from framework.models.diff_augment import DiffAugment
from framework.registry import TASKS
from framework.tasks.synthesis import SemanticSynthesisTask
from support import named


@pytest.mark.parametrize("extra, message", [
    ({"d_augment": DiffAugment(adaptive=True)},
     r"d_augment: a loss that reads labels \(gan_loss: oasis\) scores D's pixels against the label map"),
    ({"d_augment": DiffAugment(p=1.0)}, "which d_augment's transforms would move away from the image"),
    ({"r1_weight": 1.0}, r"r1_weight: R1 penalises the gradient of D's mean logit, which a loss that reads labels"),
])
def test_a_loss_that_reads_labels_refuses_augmentation_and_r1_in_one_line(extra, message):
    node = {"type": "SemanticSynthesisTask", "generator": generator(), "discriminator": segmenter_discriminator(),
            "num_classes": CLASSES, "gan_loss": "oasis", **extra}
    with pytest.raises(ConfigError, match=message):
        TASKS.build(node, path="task")
    node.update(gan_loss="hinge", discriminator=patch_discriminator())  # a loss of the logits alone takes them
    TASKS.build(node, path="task")


def near_collapsed_pair():
    """Four maps' two draws: map 0 almost collapsed (ratio 1e-7), maps 1 and 2 at the batch's mean ratio 0.1."""
    draw = torch.Generator().manual_seed(0)
    first = torch.rand(4, 3, 8, 8, generator=draw)
    gaps = torch.tensor([1e-7, 0.1, 0.1, 0.2]).view(4, 1, 1, 1)
    second = first + gaps * torch.sign(torch.randn(4, 3, 8, 8, generator=draw))
    return first.requires_grad_(True), second, torch.zeros(4, 5), torch.ones(4, 5)


def test_the_per_sample_term_gives_a_near_collapsed_map_at_most_four_times_the_pull_at_the_mean_ratio():
    first, second, noise_a, noise_b = near_collapsed_pair()
    ratios = spread_ratios(first, second, noise_a, noise_b).detach()
    torch.testing.assert_close(ratios.mean(), ratios[1])
    mode_seeking_loss(first, second, noise_a, noise_b, floor=ratios.mean()).backward()
    pull = first.grad.flatten(1).norm(dim=1)  # |d term / d r_i| x the same |d r_i / d image| for every map
    assert 3.99 < pull[0] / pull[1] <= 4.0 + 1e-4 and pull[0] / pull.sum() < 0.65
    # unbounded (the form before): the others' pull together is under 1e-7 of the near-collapsed map's
    first.grad = None
    mode_seeking_loss(first, second, noise_a, noise_b).backward()
    unbounded = first.grad.flatten(1).norm(dim=1)
    assert unbounded[1:].sum() / unbounded[0] < 1e-7


def test_the_task_bounds_the_per_sample_term_by_the_batchs_mean_ratio():
    """The task hands the floor to the loss: its logged term is 4 / (r_i + mean r + eps), not 1 / (r_i + eps)."""
    torch.manual_seed(0)
    task = SemanticSynthesisTask(generator(), patch_discriminator(), CLASSES, mode_seeking_weight=1.0)
    seen = []
    original = task.generator_step

    def spy(one_hot, labels, real, fakes, noise, optim, floor=None):
        seen.append((tuple(fake.detach() for fake in fakes), noise, floor))
        return original(one_hot, labels, real, fakes, noise, optim, floor)
    task.generator_step = spy
    logs = task.train_iteration([batch()], sgd(task))
    (fakes, noise, floor), = seen
    ratios = spread_ratios(*fakes, *noise.chunk(2))
    torch.testing.assert_close(floor, ratios.mean())
    torch.testing.assert_close(logs["loss_g_ms"], (4 / (ratios + ratios.mean() + 1e-5)).mean())


def test_the_batch_form_is_msgans_ratio_of_the_batchs_means():
    first, second, noise_a, noise_b = near_collapsed_pair()
    expected = 1 / ((first - second).abs().mean() / (noise_a - noise_b).abs().mean() + 1e-5)
    torch.testing.assert_close(mode_seeking_loss(first, second, noise_a, noise_b, form="batch"), expected)
    task = SemanticSynthesisTask(generator(), patch_discriminator(), CLASSES, mode_seeking_weight=1.0,
                                 mode_seeking_form="batch")
    assert task.mode_seeking_floor([(noise_a, None, (first, second))]) is None
    with pytest.raises(ConfigError, match="mode_seeking_form must be one of per_sample, batch, got 'mean'"):
        TASKS.build({"type": "SemanticSynthesisTask", "generator": generator(), "discriminator": patch_discriminator(),
                     "num_classes": CLASSES, "mode_seeking_form": "mean"}, path="task")


def noises_seen(task, batches):
    """The noise of every generator pass of one iteration."""
    seen = []
    handle = task.generator.register_forward_pre_hook(lambda module, inputs: seen.append(inputs[1].clone()))
    task.train_iteration(batches, sgd(task))
    handle.remove()
    return seen


def test_fresh_noise_for_g_draws_the_generators_fakes_anew():
    torch.manual_seed(0)
    reused = noises_seen(SemanticSynthesisTask(generator(), patch_discriminator(), CLASSES), [batch()])
    assert len(reused) == 1  # today's default: G's step reuses D's fakes
    fresh = noises_seen(SemanticSynthesisTask(generator(), patch_discriminator(), CLASSES, fresh_noise_for_g=True),
                        [batch()])
    assert len(fresh) == 2 and fresh[0].shape == fresh[1].shape and not torch.equal(fresh[0], fresh[1])
    with pytest.raises(ConfigError, match="fresh_noise_for_g.*true or false, got 'yes'"):
        TASKS.build({"type": "SemanticSynthesisTask", "generator": generator(), "discriminator": patch_discriminator(),
                     "num_classes": CLASSES, "fresh_noise_for_g": "yes"}, path="task")


@pytest.mark.parametrize("mode_seeking_weight", [0.0, 0.5])
def test_fresh_noise_with_two_micro_batches_equals_the_whole_batch(mode_seeking_weight):
    """D's draws of every micro-batch, then G's new draws of every micro-batch (replayed with a graph):
    the random stream of one batch twice as large, so the same step (the bound's mean ratio included)."""
    torch.manual_seed(0)
    # torch.randn draws 16 numbers or more in one call as in two, fewer than 16 alike too, but not across
    # that line: 4 noise channels (4 or 8 numbers a draw), 8 with mode seeking (16 or 32)
    nets = (generator(8 if mode_seeking_weight else 4), patch_discriminator())
    whole_logs, split_logs = whole_and_halves_alike(nets, fresh_noise_for_g=True, mode_seeking_weight=mode_seeking_weight)
    for key in ("loss_d", "loss_g", *(["loss_g_ms"] if mode_seeking_weight else [])):
        torch.testing.assert_close(split_logs[key], whole_logs[key], rtol=1e-4, atol=1e-6, msg=named(key))


def test_fresh_noise_resumes_exactly():
    """Two iterations in one go equal one, a save (state and random state) and one more in a new task."""
    torch.manual_seed(0)
    nets = (generator(), patch_discriminator())
    straight = SemanticSynthesisTask(*copy.deepcopy(nets), CLASSES, fresh_noise_for_g=True, mode_seeking_weight=0.5)
    torch.manual_seed(5)
    for seed in (1, 2):
        straight.train_iteration([batch(seed)], sgd(straight))
    first = SemanticSynthesisTask(*copy.deepcopy(nets), CLASSES, fresh_noise_for_g=True, mode_seeking_weight=0.5)
    torch.manual_seed(5)
    first.train_iteration([batch(1)], sgd(first))
    saved, rng = copy.deepcopy(first.state_dict()), torch.get_rng_state()
    torch.randn(100)  # whatever ran in between
    resumed = SemanticSynthesisTask(*copy.deepcopy(nets), CLASSES, fresh_noise_for_g=True, mode_seeking_weight=0.5)
    resumed.load_state_dict(saved)
    torch.set_rng_state(rng)
    resumed.train_iteration([batch(2)], sgd(resumed))
    for (name, a), b in zip(straight.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), name


def ema_task(**options):
    torch.manual_seed(0)
    return SemanticSynthesisTask(generator(norm="batch"), patch_discriminator(), CLASSES, ema_decay=0.5,
                                 **{"ema_bn_batches": 3, **options})


def train(task, seeds):
    for seed in seeds:
        task.train_iteration([batch(seed)], sgd(task))


def statistics(network):
    return {name: buffer.clone() for name, buffer in network.named_buffers() if "running" in name}


def reestimated_by_hand(task, seeds):
    """OASIS's way on a copy of the EMA generator: statistics reset, momentum None (a cumulative
    average), BatchNorm in train mode, the last maps through it under no_grad with the refresh's noise."""
    network = copy.deepcopy(task.ema["generator"]).eval()
    draw = torch.Generator().manual_seed(task.ema.updates.value)
    for module in network.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.reset_running_stats()
            module.momentum = None
            module.train()
    with torch.no_grad():
        for seed in seeds:
            labels = batch(seed)["mask"].long()
            network(task.one_hot(labels), torch.randn(labels.shape[0], 4, generator=draw))
    return statistics(network)


def test_the_ema_generators_batchnorm_statistics_are_reestimated_before_evaluation_and_saving():
    task = ema_task()
    train(task, [1, 2, 3, 4])
    expected = reestimated_by_hand(task, [2, 3, 4])  # the last ema_bn_batches training batches
    live = statistics(task.generator)
    torch.testing.assert_close(statistics(task.ema["generator"]), live)  # what the EMA update copies
    rng, modes = torch.get_rng_state(), [m.training for m in task.ema["generator"].modules()]
    generator_for = task.generator_for()
    assert generator_for is task.ema["generator"]
    reestimated = statistics(generator_for)
    for name, value in expected.items():
        torch.testing.assert_close(reestimated[name], value, rtol=1e-5, atol=1e-6, msg=named(name))
    assert any(not torch.allclose(reestimated[name], live[name]) for name in live)
    assert torch.equal(torch.get_rng_state(), rng)  # the training random stream untouched
    assert [m.training for m in generator_for.modules()] == modes
    assert all(m.momentum == 0.1 for m in generator_for.modules() if isinstance(m, torch.nn.BatchNorm2d))
    torch.testing.assert_close(statistics(task.generator), live)  # the live generator untouched
    # a checkpoint holds what evaluation uses, refreshed before it is written
    train(task, [5])
    saved = task.state_dict()
    for name, value in reestimated_by_hand(task, [3, 4, 5]).items():
        torch.testing.assert_close(saved[f"ema.generator.{name}"], value, rtol=1e-5, atol=1e-6, msg=named(name))
    module, _, _ = task.deployable()  # export: the same refreshed network
    assert module.generator is task.ema["generator"]


def test_reestimating_never_changes_training_and_resumes_exactly():
    """Refreshing after every iteration leaves the trained networks and the random stream as
    without; a run saved (state, each rank's state, random state) and resumed ends the same."""
    plain, refreshed = ema_task(), ema_task()
    torch.manual_seed(7)
    train(plain, [1, 2, 3, 4])
    plain_rng = torch.get_rng_state()
    torch.manual_seed(7)
    for seed in (1, 2, 3, 4):
        train(refreshed, [seed])
        refreshed.generator_for()
    assert torch.equal(torch.get_rng_state(), plain_rng)
    for (name, a), b in zip(plain.generator.state_dict().items(), refreshed.generator.state_dict().values()):
        assert torch.equal(a, b), name
    for (name, a), b in zip(plain.discriminator.state_dict().items(), refreshed.discriminator.state_dict().values()):
        assert torch.equal(a, b), name
    first = ema_task()
    torch.manual_seed(7)
    train(first, [1, 2])
    saved, rank_state, rng = first.state_dict(), copy.deepcopy(first.rank_state_dict()), torch.get_rng_state()
    assert len(rank_state["ema_bn"]["labels"]) == 2
    resumed = ema_task()
    resumed.load_state_dict(saved)
    resumed.load_rank_state_dict(rank_state)
    torch.set_rng_state(rng)
    train(resumed, [3, 4])
    for (name, a), b in zip(plain.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), name


def test_ema_bn_batches_zero_keeps_the_live_statistics_and_a_bad_value_is_one_line():
    task = ema_task(ema_bn_batches=0)
    train(task, [1, 2])
    torch.testing.assert_close(statistics(task.generator_for()), statistics(task.generator))
    assert task.rank_state_dict() == {}
    with pytest.raises(ConfigError, match=r"ema_bn_batches must be an integer >= 0 \(0: keep the live generator's "
                                          r"statistics\), got -1"):
        TASKS.build({"type": "SemanticSynthesisTask", "generator": generator(), "discriminator": patch_discriminator(),
                     "num_classes": CLASSES, "ema_decay": 0.9, "ema_bn_batches": -1}, path="task")


def test_a_resumed_run_with_a_batchnorm_ema_ends_bit_identical(tmp_path):
    """The engine's way: the remembered maps travel in the checkpoint's per-rank state, and the
    EMA generator's statistics (re-estimated at each save) come out the same after a resume."""
    import shutil

    from test_resume import assert_same_state
    from test_synthesis_tools import CONFIGS, SMALL

    from support import call_tool

    options = [option for option in SMALL if "param_free_norm" not in option]  # BatchNorm, the config's own
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    result = call_tool("train", "--config", CONFIGS["oasis"], "--work-dir", whole, *options)
    assert result.returncode == 0, result.stderr
    (resumed / "checkpoints").mkdir(parents=True)
    shutil.copy(whole / "checkpoints" / "iter_2.pth", resumed / "checkpoints" / "iter_2.pth")
    (resumed / "checkpoints" / "latest").write_text("iter_2.pth")
    result = call_tool("train", "--config", CONFIGS["oasis"], "--work-dir", resumed, "--resume", *options)
    assert result.returncode == 0, result.stderr
    a, b = (torch.load(d / "checkpoints" / "iter_4.pth", weights_only=True) for d in (whole, resumed))
    assert len(a["task_by_rank"][0]["ema_bn"]["labels"]) == 4
    for part in ("task", "optim", "rng", "task_by_rank"):
        assert_same_state(b[part], a[part], part)
    live = {key: value for key, value in a["task"].items() if key.startswith("generator.") and "running" in key}
    assert any(not torch.equal(a["task"][f"ema.{key}"], value) for key, value in live.items())  # re-estimated
