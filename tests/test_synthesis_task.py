"""SemanticSynthesisTask: one iteration of each discriminator against a hand-written loop (SPADE's
PatchGAN on [label map, image] with hinge and feature matching; OASIS's segmenter with
class-balanced CE and LabelMix; MSGAN's mode-seeking term), the interface the tools ask, and the
configuration it refuses. What evaluation returns: tests/test_synthesis_evaluation.py."""

import copy

import pytest
import torch
import torch.nn.functional as F

import framework  # noqa: F401  (fills the registries)
import framework.visualization.palette
from framework.errors import ConfigError
from framework.losses.feature_matching import FeatureMatchingLoss
from framework.losses.mode_seeking import mode_seeking_loss
from framework.losses.oasis import (
    class_balanced_ce,
    fake_class_ce,
    labelmix_consistency,
    labelmix_images,
    labelmix_mask,
)
from framework.models.discriminators import MultiScaleDiscriminator
from framework.models.spade import SPADEGenerator, one_hot_labels
from framework.models.unet import UNet
from framework.optim.optimizers import build_optimizers
from framework.registry import TASKS
from framework.tasks.synthesis import SemanticSynthesisTask
from support import named

CLASSES, SIZE, NOISE = 3, 32, 4
LR_G, LR_D = 0.05, 0.1


def generator(noise_dim=NOISE, norm="instance"):
    return SPADEGenerator(CLASSES, image_size=SIZE, base_channels=4, num_up_layers=2, noise_dim=noise_dim,
                          spectral_norm=False, spade_hidden=8, param_free_norm=norm)


def patch_discriminator():
    return MultiScaleDiscriminator(CLASSES + 3, num_scales=2, base_channels=4, num_layers=2, norm="none")


def segmenter_discriminator():
    return UNet(in_channels=3, num_classes=CLASSES + 1, base_channels=4, depth=2, norm="none")


def sgd(task):
    return build_optimizers({"optimizers": {"generator": {"type": "SGD", "lr": LR_G, "params": "generator"},
                                            "discriminator": {"type": "SGD", "lr": LR_D, "params": "discriminator"}}},
                            task, max_iters=10)


def batch(seed=0):
    draw = torch.Generator().manual_seed(seed)
    mask = torch.randint(0, CLASSES, (2, SIZE, SIZE), generator=draw).to(torch.uint8)
    mask[0, :3, :3] = 255  # don't-care pixels
    return {"image": torch.randint(0, 256, (2, 3, SIZE, SIZE), dtype=torch.uint8, generator=draw), "mask": mask,
            "index": torch.tensor([3, 8]), "name": ["a", "b"]}


def step(network, loss, lr):
    network.zero_grad(set_to_none=True)
    loss.backward()
    with torch.no_grad():
        for p in network.parameters():
            if p.grad is not None:
                p -= lr * p.grad


def one_iteration(g, d, **options):
    """One iteration of a task on g and d from seed 1 -> (its logs, copies of g and d as they were,
    the labels, their one-hot map, the real images in [-1, 1]), with the random state put back to
    seed 1 for the hand-written loop."""
    ref_g, ref_d = copy.deepcopy(g), copy.deepcopy(d)
    task = SemanticSynthesisTask(g, d, CLASSES, **options)
    data = batch()
    torch.manual_seed(1)
    logs = task.train_iteration([data], sgd(task))
    torch.manual_seed(1)
    labels = data["mask"].long()
    return logs, ref_g, ref_d, labels, one_hot_labels(labels, CLASSES), data["image"].float() / 127.5 - 1


class ScaledL1(torch.nn.Module):
    """A stand-in for the perceptual loss (any module of (fake, real)): no VGG weights here."""

    def forward(self, fake, real):
        return 3 * (fake - 0.5 * real).abs().mean()  # not symmetric: the arguments in their order


def test_one_spade_iteration_equals_the_hand_written_loop():
    """With D's terms weighed 0.5, G's adversarial term 2 and a perceptual term: each weight where it belongs."""
    torch.manual_seed(0)
    g, d = generator(), patch_discriminator()
    logs, ref_g, ref_d, _, one_hot, real = one_iteration(g, d, gan_loss="hinge", d_weight=0.5, adv_weight=2.0,
                                                         feature_matching=FeatureMatchingLoss(10.0),
                                                         perceptual=ScaledL1())
    fake = ref_g(one_hot, torch.randn(2, NOISE))
    real_out, fake_out = ref_d(torch.cat([one_hot, real], 1)), ref_d(torch.cat([one_hot, fake.detach()], 1))
    loss_d = 0.5 * (sum(F.relu(1 - x).mean() for x in real_out.logits) / 2
                    + sum(F.relu(1 + x).mean() for x in fake_out.logits) / 2)
    step(ref_d, loss_d, LR_D)
    for p in ref_d.parameters():
        p.requires_grad_(False)
    fake_out, real_out = ref_d(torch.cat([one_hot, fake], 1)), ref_d(torch.cat([one_hot, real], 1))
    adversarial = -2.0 * sum(x.mean() for x in fake_out.logits) / 2
    perceptual = 3 * (fake - 0.5 * real).abs().mean()
    loss_g = adversarial + FeatureMatchingLoss(10.0)(fake_out, real_out) + perceptual
    step(ref_g, loss_g, LR_G)

    for key, value in {"loss_d": loss_d, "loss_g": loss_g, "loss_g_adv": adversarial, "loss_g_vgg": perceptual}.items():
        torch.testing.assert_close(logs[key], value.detach(), rtol=1e-5, atol=1e-6, msg=named(key))
    for name, (a, b) in {**{f"g.{k}": (v, dict(ref_g.named_parameters())[k]) for k, v in g.named_parameters()},
                         **{f"d.{k}": (v, dict(ref_d.named_parameters())[k]) for k, v in d.named_parameters()}}.items():
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=named(name))


def test_one_oasis_iteration_with_labelmix_equals_the_hand_written_loop():
    torch.manual_seed(0)
    g, d = generator(), segmenter_discriminator()
    logs, ref_g, ref_d, labels, one_hot, real = one_iteration(g, d, gan_loss="oasis", labelmix_weight=3.0)
    fake = ref_g(one_hot, torch.randn(2, NOISE))
    real_out, fake_out = ref_d(real), ref_d(fake.detach())
    mask = labelmix_mask(labels, CLASSES)
    mixed_out = ref_d(labelmix_images(mask, real, fake.detach()))
    labelmix = labelmix_consistency(mixed_out, real_out, fake_out, mask, labels, weight=3.0)  # not the default 10
    loss_d = class_balanced_ce(real_out, labels) + fake_class_ce(fake_out, labels) + labelmix
    step(ref_d, loss_d, LR_D)
    for p in ref_d.parameters():
        p.requires_grad_(False)
    loss_g = class_balanced_ce(ref_d(fake), labels)
    step(ref_g, loss_g, LR_G)

    assert logs["loss_d_labelmix"] > 0 and {"d_real_logit", "d_fake_logit"} <= set(logs)  # D's diagnostics logged
    for key, value in {"loss_d": loss_d, "loss_d_labelmix": labelmix, "loss_g": loss_g}.items():
        torch.testing.assert_close(logs[key], value.detach(), rtol=1e-5, atol=1e-7, msg=named(key))
    for a, b in zip([*g.parameters(), *d.parameters()], [*ref_g.parameters(), *ref_d.parameters()]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_the_mode_seeking_term_is_msgans_per_image_ratio_in_float32():
    first = torch.zeros(2, 3, 4, 4, dtype=torch.bfloat16)
    second = torch.stack([torch.zeros(3, 4, 4), torch.full((3, 4, 4), -0.1)]).to(torch.bfloat16)
    second[0, 1] = 1.0  # a third of image 0's values differ by 1: spread 1/3, which bfloat16 would round to 0.333984375
    first_noise, second_noise = torch.zeros(2, 5), torch.tensor([[2.0] * 5, [1.0, -1.0, 1.0, -1.0, 1.0]])
    # image spreads 1/3 and 0.1 (bfloat16's 0.1 is 0.10009765625), noise spreads 2 and 1
    expected = (1 / ((1 / 3) / 2 + 1e-5) + 1 / (0.10009765625 / 1 + 1e-5)) / 2
    loss = mode_seeking_loss(first, second, first_noise, second_noise)
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, torch.tensor(expected), rtol=1e-6, atol=0)


def test_one_oasis_iteration_with_mode_seeking_equals_the_hand_written_loop():
    """Each label map drawn twice in one pass of the doubled batch (batch norm: both draws in its
    statistics), D and G's adversarial term on the first draws, 4 / (spread ratio + the batch's
    mean ratio + eps) on both."""
    torch.manual_seed(0)
    g, d = generator(norm="batch"), segmenter_discriminator()
    logs, ref_g, ref_d, labels, one_hot, real = one_iteration(g, d, gan_loss="oasis", mode_seeking_weight=0.7)
    noise = torch.randn(2, 2, NOISE)  # map by map: (first, second) draw
    fake, second = ref_g(torch.cat([one_hot, one_hot]), torch.cat([noise[:, 0], noise[:, 1]])).chunk(2)
    loss_d = class_balanced_ce(ref_d(real), labels) + fake_class_ce(ref_d(fake.detach()), labels)
    step(ref_d, loss_d, LR_D)
    for p in ref_d.parameters():
        p.requires_grad_(False)
    ratios = [(fake[i] - second[i]).abs().mean() / (noise[i, 0] - noise[i, 1]).abs().mean() for i in range(2)]
    floor = (sum(ratios) / 2).detach()  # the bound: the batch's mean ratio (tests/test_synthesis_fidelity.py)
    mode_seeking = 0.7 * sum(4 / (ratio + floor + 1e-5) for ratio in ratios) / 2
    loss_g = class_balanced_ce(ref_d(fake), labels) + mode_seeking
    step(ref_g, loss_g, LR_G)

    for key, value in {"loss_d": loss_d, "loss_g": loss_g, "loss_g_ms": mode_seeking}.items():
        torch.testing.assert_close(logs[key], value.detach(), rtol=1e-5, atol=1e-7, msg=named(key))
    for (name, a), b in zip([*g.named_parameters(), *d.named_parameters()], [*ref_g.parameters(), *ref_d.parameters()]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=named(name))
    for (name, a), b in zip(g.named_buffers(), ref_g.buffers()):  # running statistics of both draws
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=named(name))


def test_the_tools_interface_and_the_exported_module():
    torch.manual_seed(0)
    task = SemanticSynthesisTask(generator(), patch_discriminator(), CLASSES, ema_decay=0.9).eval()
    assert task.conditioning == "labels" and task.noise_shape == (NOISE,) and task.generator_for() is task.ema["generator"]
    examples = task.network_examples(SIZE, SIZE)
    assert [tuple(x.shape) for x in examples["generator"][1]] == [(1, CLASSES, SIZE, SIZE), (1, NOISE)]
    assert tuple(examples["discriminator"][1][0].shape) == (1, CLASSES + 3, SIZE, SIZE)
    module, kind, classes = task.deployable()
    labels = batch()["mask"].long()
    noise = torch.randn(2, NOISE)
    with torch.no_grad():
        exported_input = module(labels.float(), noise)
        direct = (task.generator_for()(one_hot_labels(labels, CLASSES), noise) + 1) / 2
    assert (kind, classes) == ("labels", CLASSES)
    torch.testing.assert_close(exported_input, direct.clamp(0, 1))
    odd = labels[:, :SIZE - 3, :SIZE - 5]  # padded with don't-care to the generator's multiple, cropped back
    with torch.no_grad():
        image = module(odd.float(), noise)
        padded = torch.nn.functional.pad(odd, (0, 1, 0, 3), value=255)  # 29 x 27 -> 32 x 28
        expected = ((task.generator_for()(one_hot_labels(padded, CLASSES), noise) + 1) / 2).clamp(0, 1)
    assert image.shape == (2, 3, SIZE - 3, SIZE - 5)
    torch.testing.assert_close(image, expected[..., :SIZE - 3, :SIZE - 5])


@pytest.mark.parametrize("extra, message", [
    ({"gan_loss": "hinge", "labelmix_weight": 10.0}, "labelmix_weight: LabelMix needs a segmenter discriminator"),
    ({"num_classes": 4}, "generator.num_classes 3 differs from the task's num_classes 4"),
    ({"labelmix_weight": float("nan"), "gan_loss": "oasis"}, "labelmix_weight must be a finite number >= 0, got nan"),
    ({"mode_seeking_weight": -1.0}, "mode_seeking_weight must be a finite number >= 0, got -1.0"),
    ({"mode_seeking_weight": 1.0, "generator": generator(noise_dim=0)},
     r"mode_seeking_weight: the generator has no noise \(noise_dim 0\)"),
])
def test_configuration_mistakes_are_one_line(extra, message):
    node = {"type": "SemanticSynthesisTask", "generator": generator(), "discriminator": segmenter_discriminator(),
            "num_classes": CLASSES, **extra}
    with pytest.raises(ConfigError, match=message):
        TASKS.build(node, path="task")


def test_the_defaults():
    task = SemanticSynthesisTask(generator(), patch_discriminator(), CLASSES)
    adversary = task.adversary
    assert (adversary.loss.name, adversary.d_weight, adversary.adv_weight, adversary.r1.weight, adversary.r1.interval,
            adversary.augment, adversary.feature_matching, task.perceptual, task.labelmix_weight, task.ema,
            task.ignore_index, task.mode_seeking_weight) == ("hinge", 1.0, 1.0, 0.0, 1, None, None, None, 0.0, None, 255,
                                                             0.0)
    assert task.judges_pairs and not task.uses_double_backward
    assert torch.equal(task.palette, torch.from_numpy(framework.visualization.palette.default_palette(CLASSES)))


def whole_and_halves_alike(nets, **options) -> tuple[dict, dict]:
    """One iteration of the batch whole and in two micro-batches, from copies of `nets` and the same
    random state; the parameters checked equal after it; (whole logs, split logs)."""
    whole = SemanticSynthesisTask(*copy.deepcopy(nets), CLASSES, **options)
    split = SemanticSynthesisTask(*copy.deepcopy(nets), CLASSES, **options)
    data = batch()
    halves = [{key: value[i:i + 1] for key, value in data.items()} for i in range(2)]
    torch.manual_seed(3)
    whole_logs = whole.train_iteration([data], sgd(whole))
    torch.manual_seed(3)
    split_logs = split.train_iteration(halves, sgd(split))
    for (name, a), b in zip(whole.named_parameters(), split.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6, msg=named(name))
    return whole_logs, split_logs


@pytest.mark.parametrize("mode_seeking_weight", [0.0, 0.5])
def test_two_micro_batches_equal_the_whole_batch_in_process(mode_seeking_weight):
    """Every D micro-batch and the D step, then every G micro-batch with its fake drawn again under
    the same random state, and the G step: what one batch twice as large does (with mode seeking,
    each map's two noises too)."""
    torch.manual_seed(0)
    # 8 noise channels with mode seeking: every draw 16 or 32 numbers, which torch.randn draws alike
    # in one call or two; below 16 it switches method and micro-batches would draw other noise
    nets = (generator(8 if mode_seeking_weight else NOISE), patch_discriminator())
    whole_logs, split_logs = whole_and_halves_alike(nets, feature_matching=FeatureMatchingLoss(10.0),
                                                    mode_seeking_weight=mode_seeking_weight)
    assert ("loss_g_ms" in whole_logs) == bool(mode_seeking_weight)
    for key in ("loss_d", "loss_g", "loss_g_fm", *(["loss_g_ms"] if mode_seeking_weight else [])):
        torch.testing.assert_close(split_logs[key], whole_logs[key], rtol=1e-4, atol=1e-6, msg=named(key))


def test_generator_inputs_are_seeded_class_maps_and_noise():
    task = SemanticSynthesisTask(generator(), patch_discriminator(), CLASSES)
    one_hot, noise = task.generator_inputs(2, 8, 12, seed=4)
    again, _ = task.generator_inputs(2, 8, 12, seed=4)
    other, _ = task.generator_inputs(2, 8, 12, seed=5)
    assert one_hot.shape == (2, CLASSES, 8, 12) and noise.shape == (2, NOISE)
    assert torch.equal(one_hot, again) and not torch.equal(one_hot, other)
    assert torch.equal(one_hot.sum(dim=1), torch.ones(2, 8, 12))  # one class per pixel
    without = SemanticSynthesisTask(generator(noise_dim=0), patch_discriminator(), CLASSES)
    assert len(without.generator_inputs(1, 8, 8)) == 1 and without.noise_shape is None


def test_the_exported_module_lights_the_dont_care_channel():
    g = SPADEGenerator(CLASSES, contain_dontcare_label=True, image_size=SIZE, base_channels=4, num_up_layers=2,
                       noise_dim=0, spectral_norm=False, spade_hidden=8)
    task = SemanticSynthesisTask(g, patch_discriminator(), CLASSES).eval()
    module, _, _ = task.deployable()
    labels = batch()["mask"].long()
    with torch.no_grad():
        expected = ((g(one_hot_labels(labels, CLASSES, 255, True)) + 1) / 2).clamp(0, 1)
        torch.testing.assert_close(module(labels.float()), expected)


def test_the_ema_follows_the_generator_after_each_iteration():
    torch.manual_seed(0)
    task = SemanticSynthesisTask(generator(), patch_discriminator(), CLASSES, ema_decay=0.5)
    before = [p.clone() for p in task.ema["generator"].parameters()]
    task.train_iteration([batch()], sgd(task))
    assert task.ema.updates.value == 1
    for average, old, current in zip(task.ema["generator"].parameters(), before, task.generator.parameters()):
        torch.testing.assert_close(average, 0.5 * old + 0.5 * current)
