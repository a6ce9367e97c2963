"""The GAN toolkit's components against hand computations: spectral norm, the multi-scale
discriminator and its losses, feature matching, R1 (lazy, float32 under AMP), DiffAugment."""

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import framework  # noqa: F401  (fills the registries)
from framework.errors import ConfigError
from framework.losses.gan import adversarial_loss, gradient_penalty
from framework.models.diff_augment import DiffAugment
from framework.models.discriminators import MultiScaleDiscriminator
from framework.optim.optimizers import build_optimizers
from framework.registry import LOSSES, MODELS, TASKS
from framework.tasks.discriminator_step import LazyR1, d_diagnostics, d_input_pair, judge_fake_for_generator
from support import named


def patch_discriminator(**extra):
    return MODELS.build({"type": "MultiScaleDiscriminator", "in_channels": 3, "num_scales": 2, "base_channels": 4,
                         "num_layers": 2, "norm": "none", **extra})


# ----------------------------------------------------------------------------- spectral norm


def test_spectral_norm_divides_every_weight_by_its_largest_singular_value():
    torch.manual_seed(0)
    network = patch_discriminator(spectral_norm=True).train()
    images = torch.randn(2, 3, 32, 32)
    for _ in range(60):  # one power iteration per training forward
        network(images)
    layers = [m for m in network.modules() if isinstance(m, nn.Conv2d)]
    assert len(layers) == 8  # per scale: 3 blocks and the head
    for layer in layers:
        original = layer.parametrizations.weight.original
        sigma = torch.linalg.matrix_norm(original.detach().reshape(original.shape[0], -1), ord=2)
        torch.testing.assert_close(layer.weight.detach(), original.detach() / sigma, atol=1e-5, rtol=1e-4)
    # the power-iteration vectors are state
    state = network.state_dict()
    assert "scales.0.head.parametrizations.weight.0._u" in state and "scales.0.head.parametrizations.weight.0._v" in state


def test_spectral_norm_of_a_transposed_conv_uses_its_output_channels():
    torch.manual_seed(0)
    import projects.dcgan  # noqa: F401

    generator = MODELS.build({"type": "DCGANGenerator", "latent_dim": 4, "base_channels": 4, "image_size": 8,
                              "spectral_norm": True}).train()
    for _ in range(60):
        generator(torch.randn(2, 4, 1, 1))
    layer = generator.body[3]
    original = layer.parametrizations.weight.original.detach()  # in x out x k x k
    sigma = torch.linalg.matrix_norm(original.transpose(0, 1).reshape(original.shape[1], -1), ord=2)
    torch.testing.assert_close(layer.weight.detach(), original / sigma, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("value, message", [("yes", "discriminator.spectral_norm: expected true or false, got 'yes'")])
def test_spectral_norm_setting_is_checked(value, message):
    with pytest.raises(ConfigError, match=message):
        MODELS.build({"type": "MultiScaleDiscriminator", "spectral_norm": value}, path="discriminator")


# ----------------------------------------------------------------------------- multi-scale D and losses


def test_multi_scale_discriminator_sees_the_image_halved_per_scale():
    network = patch_discriminator(num_scales=3)
    images = torch.randn(2, 3, 64, 64)
    output = network(images)
    assert len(output.logits) == len(output.features) == 3
    assert all(len(features) == 3 for features in output.features)  # num_layers + 1 blocks
    # scale s sees 64 / 2^s pixels: its logits are those of its PatchGAN on the pooled image
    half = F.avg_pool2d(images, 3, stride=2, padding=1, count_include_pad=False)
    torch.testing.assert_close(output.logits[1], network.scales[1](half)[0])
    quarter = F.avg_pool2d(half, 3, stride=2, padding=1, count_include_pad=False)
    torch.testing.assert_close(output.features[2][0], network.scales[2].blocks[0](quarter))


@pytest.mark.parametrize("kind", ["vanilla", "lsgan", "hinge", "wgan-gp"])
def test_gan_losses_average_over_scales(kind):
    torch.manual_seed(0)
    output_real, output_fake = patch_discriminator()(torch.randn(2, 3, 32, 32)), \
        patch_discriminator()(torch.randn(2, 3, 32, 32))
    loss = adversarial_loss(kind)
    real, fake = loss.discriminator(output_real, output_fake)
    per_scale = [loss.discriminator(r, f) for r, f in zip(output_real.logits, output_fake.logits)]
    # tolerances far below the values: wgan-gp's terms, means of a fresh D's logits, are ~1e-7,
    # under assert_close's default atol of 1e-5
    close = dict(rtol=1e-5, atol=1e-12)
    torch.testing.assert_close(real, (per_scale[0][0] + per_scale[1][0]) / 2, **close)
    torch.testing.assert_close(fake, (per_scale[0][1] + per_scale[1][1]) / 2, **close)
    torch.testing.assert_close(loss.generator(output_fake),
                               (loss.generator(output_fake.logits[0]) + loss.generator(output_fake.logits[1])) / 2,
                               **close)


def test_feature_matching_is_the_pix2pixhd_weighted_l1_over_scales_and_layers():
    torch.manual_seed(0)
    network = patch_discriminator(num_layers=3)  # 2 scales x 4 feature maps
    fake, real = network(torch.randn(2, 3, 64, 64)), network(torch.randn(2, 3, 64, 64))
    loss = LOSSES.build({"type": "FeatureMatchingLoss", "weight": 10.0})(fake, real)
    expected = 0.0
    for scale in range(2):
        for layer in range(4):
            difference = (fake.features[scale][layer] - real.features[scale][layer]).abs().mean()
            expected = expected + 10.0 * (4 / 4) * (1 / 2) * difference
    torch.testing.assert_close(loss, expected)


def test_feature_matching_names_a_discriminator_without_features():
    with_features = patch_discriminator()(torch.randn(1, 3, 32, 32))
    for fake, real, role in ((torch.zeros(1, 1, 2, 2), with_features, "fake"),
                             (with_features, torch.zeros(1, 1, 2, 2), "real")):
        message = (f"^feature matching needs the discriminator's intermediate features, but its output on the {role} "
                   r"images is a Tensor: use a discriminator that returns them \(MultiScaleDiscriminator\)$")
        with pytest.raises(ValueError, match=message):
            LOSSES.build({"type": "FeatureMatchingLoss"})(fake, real)


def test_feature_matching_weight_is_pix2pixhds_10_by_default_and_must_be_positive():
    assert LOSSES.build({"type": "FeatureMatchingLoss"}).weight == 10.0
    assert LOSSES.build({"type": "FeatureMatchingLoss", "weight": 0.5}).weight == 0.5
    with pytest.raises(ConfigError, match="weight must be positive, got 0"):
        LOSSES.build({"type": "FeatureMatchingLoss", "weight": 0})


# ----------------------------------------------------------------------------- R1


def test_r1_equals_the_gradient_norm_of_d_at_the_reals_and_every_parameter_gets_a_gradient():
    torch.manual_seed(0)
    network = patch_discriminator()
    real = torch.randn(3, 3, 32, 32)
    r1 = LazyR1(weight=10.0, interval=4)
    assert [step for step in range(1, 13) if r1.due(step)] == [4, 8, 12]
    _, term = r1.real_pass(network, real)
    squared_norms = []
    for image in real:  # each sample apart: D's verdict = its mean logit, averaged over the scales
        image = image[None].clone().requires_grad_(True)
        output = network(image)
        verdict = (output.logits[0].mean() + output.logits[1].mean()) / 2
        (grad,) = torch.autograd.grad(verdict, image)
        squared_norms.append(grad.pow(2).sum())
    expected = 10.0 / 2 * 4 * torch.stack(squared_norms).mean()
    # relative only: a freshly initialised D's input gradients are small (the penalty is ~1e-7
    # here), under assert_close's default atol of 1e-5, where any value would pass
    assert expected > 0
    torch.testing.assert_close(term, expected, rtol=1e-4, atol=0)
    term.backward()
    # the last layer's bias does not change dD/dx: only the 0 x logits tie gives it a gradient
    assert all(p.grad is not None for p in network.parameters())


def test_penalties_run_in_float32_under_autocast():
    torch.manual_seed(0)
    network = patch_discriminator()
    real, fake = torch.randn(2, 3, 32, 32), torch.randn(2, 3, 32, 32)
    _, reference = LazyR1(1.0).real_pass(network, real)
    torch.manual_seed(1)
    reference_gp = gradient_penalty(network, real, fake)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        output, under_amp = LazyR1(1.0).real_pass(network, real)
        torch.manual_seed(1)
        under_amp_gp = gradient_penalty(network, real, fake)
    assert under_amp.dtype == under_amp_gp.dtype == torch.float32
    assert all(logits.dtype == torch.float32 for logits in output.logits)  # D's pass itself, not only the sum
    torch.testing.assert_close(under_amp, reference, atol=0, rtol=0)
    torch.testing.assert_close(under_amp_gp, reference_gp, atol=0, rtol=0)


class TinyGenerator(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.ConvTranspose2d(4, 3, 8), nn.Tanh())

    def forward(self, noise):
        return self.body(noise)


def gan_task(**extra):
    node = {"type": "GANTask", "latent_dim": 4, "gan_loss": "hinge", "generator": TinyGenerator(),
            "discriminator": patch_discriminator(num_scales=1, num_layers=1), **extra}
    return TASKS.build(node)


def sgd_optimizers(task, scaler=None):
    entry = {"type": "SGD", "lr": 0.1}
    cfg = {"optimizers": {"generator": {**entry, "params": "generator"},
                          "discriminator": {**entry, "params": "discriminator"}}}
    return build_optimizers(cfg, task, max_iters=10, scaler=scaler)


def test_an_r1_step_under_a_grad_scaler_equals_the_step_without_amp():
    """The penalty is taken on D's unscaled output: with a GradScaler at 2^16, the update is
    the one of a plain float32 step (a penalty on scaled gradients would be 2^32 too large)."""
    torch.manual_seed(0)
    task = gan_task(r1_weight=10.0)
    reference = gan_task(r1_weight=10.0)
    reference.load_state_dict(task.state_dict())
    batch = {"image": torch.randint(0, 256, (4, 3, 8, 8), dtype=torch.uint8)}
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    torch.manual_seed(1)
    logs = task.train_step(batch, sgd_optimizers(task, scaler))
    torch.manual_seed(1)
    reference_logs = reference.train_step(batch, sgd_optimizers(reference))
    assert "loss_d_r1" in logs
    assert reference_logs["loss_d_r1"] > 0
    # relative: the penalty is ~1e-6 here, under assert_close's default atol of 1e-5
    torch.testing.assert_close(logs["loss_d_r1"], reference_logs["loss_d_r1"], rtol=1e-4, atol=0)
    for (name, ours), theirs in zip(task.discriminator.named_parameters(), reference.discriminator.parameters()):
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5, msg=named(name))


def test_a_conditional_generator_step_with_every_term_equals_the_terms_by_hand():
    """pix2pixHD's G step: the adversarial and feature-matching terms on D's outputs for the fake
    and the real, both augmented with the condition by one DiffAugment draw; L1 and the perceptual
    loss on the images themselves."""
    torch.manual_seed(0)
    task = TASKS.build({
        "type": "GANTask", "gan_loss": "hinge", "l1_weight": 100.0,
        "generator": nn.Sequential(nn.Conv2d(3, 3, 3, padding=1), nn.Tanh()),
        "discriminator": patch_discriminator(in_channels=6), "d_augment": {"type": "DiffAugment", "p": 1.0},
        "feature_matching": {"type": "FeatureMatchingLoss", "weight": 10.0},
        "perceptual": {"type": "VGGPerceptualLoss", "arch": "vgg16", "weights": "random", "layers": {"relu1_1": 1.0}}})
    condition, real = torch.rand(2, 3, 32, 32) * 2 - 1, torch.rand(2, 3, 32, 32) * 2 - 1
    fake = task.generator(condition)
    torch.manual_seed(5)
    logs = task.generator_step(condition, real, fake, sgd_optimizers(task))
    torch.manual_seed(5)
    seen_condition, seen_fake, seen_real = task.adversary.augment(condition, fake.detach(), real)
    with torch.no_grad():
        fake_output = task.discriminator(torch.cat([seen_condition, seen_fake], dim=1))
        real_output = task.discriminator(torch.cat([seen_condition, seen_real], dim=1))
        expected = {"loss_g_adv": -sum(logits.mean() for logits in fake_output.logits) / 2,  # hinge's G term
                    "loss_g_fm": task.adversary.feature_matching(fake_output, real_output),
                    "loss_g_l1": 100.0 * F.l1_loss(fake, real),
                    "loss_g_vgg": task.perceptual(fake, real)}
    assert all(value.abs() > 1e-4 for value in expected.values())
    for key, value in expected.items():
        torch.testing.assert_close(logs[key], value, rtol=1e-5, atol=1e-7, msg=named(key))
    torch.testing.assert_close(logs["loss_g"], sum(expected.values()), rtol=1e-5, atol=1e-7)


def test_a_conditional_discriminator_step_sees_real_and_fake_pairs_augmented():
    """D's terms on (condition, real) and (condition, fake), each pair through its own DiffAugment
    draw (real first), as by hand."""
    torch.manual_seed(0)
    task = TASKS.build({"type": "GANTask", "gan_loss": "hinge", "d_weight": 0.5,
                        "generator": nn.Sequential(nn.Conv2d(3, 3, 3, padding=1), nn.Tanh()),
                        "discriminator": patch_discriminator(in_channels=6),
                        "d_augment": {"type": "DiffAugment", "p": 1.0}})
    condition, real, fake = (torch.rand(2, 3, 32, 32) * 2 - 1 for _ in range(3))
    discriminator = copy.deepcopy(task.discriminator)  # as the step saw it, before its update
    torch.manual_seed(5)
    loss, logs = task.adversary.d_loss(task.discriminator, real, fake, condition)
    sgd_optimizers(task).update(loss, "discriminator")
    (verdicts,) = task.adversary._verdicts  # what the adaptive p reads after the D step
    torch.manual_seed(5)
    real_pair, fake_pair = (torch.cat(task.adversary.augment(condition, image), dim=1) for image in (real, fake))
    with torch.no_grad():
        real_output, fake_output = discriminator(real_pair), discriminator(fake_pair)
    expected_real = 0.5 * sum(F.relu(1 - logits).mean() for logits in real_output.logits) / 2
    expected_fake = 0.5 * sum(F.relu(1 + logits).mean() for logits in fake_output.logits) / 2
    torch.testing.assert_close(logs["loss_d_real"], expected_real, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(logs["loss_d_fake"], expected_fake, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(verdicts, sum(logits.mean(dim=(1, 2, 3)) for logits in real_output.logits) / 2,
                               rtol=1e-5, atol=1e-7)


def test_gan_task_refuses_perceptual_loss_without_targets():
    with pytest.raises(ConfigError, match="perceptual: the perceptual loss needs paired targets"):
        gan_task(perceptual={"type": "VGGPerceptualLoss", "arch": "vgg16", "weights": "random",
                             "layers": {"relu1_1": 1.0}})


def test_generator_step_with_feature_matching_leaves_the_discriminator_without_gradients():
    torch.manual_seed(0)
    task = TASKS.build({"type": "GANTask", "gan_loss": "lsgan", "generator": nn.Conv2d(3, 3, 3, padding=1),
                        "discriminator": MultiScaleDiscriminator(6, num_scales=2, base_channels=4, num_layers=2, norm="none"),
                        "feature_matching": {"type": "FeatureMatchingLoss", "weight": 10.0}})
    batch = {"input": torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8),
             "target": torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8)}
    condition, real = task.unpack(batch)
    fake = task.generator(condition)

    class RecordingOptim:
        def update(self, loss, name):
            self.name = name
            loss.backward()

    optim = RecordingOptim()
    logs = task.generator_step(condition, real, fake, optim)
    assert optim.name == "generator" and logs["loss_g_fm"] > 0
    assert all(p.grad is None for p in task.discriminator.parameters())
    assert all(p.grad is not None for p in task.generator.parameters())


# ----------------------------------------------------------------------------- what D sees


def test_lazy_r1_is_off_by_default_and_on_every_step_unless_lazy():
    assert not LazyR1().enabled and not LazyR1().due(1)
    assert [step for step in range(1, 4) if LazyR1(1.0).due(step)] == [1, 2, 3]


@pytest.mark.parametrize("conditional", [False, True], ids=["unconditional", "conditional"])
def test_d_input_pair_augments_condition_and_image_with_one_draw(conditional):
    torch.manual_seed(0)
    condition = torch.randn(4, 3, 16, 16) if conditional else None
    image = torch.randn(4, 3, 16, 16)
    pair = [image] if condition is None else [condition, image]
    augment = DiffAugment(p=1.0)
    torch.manual_seed(7)
    seen = d_input_pair(condition, image, augment)
    torch.manual_seed(7)
    expected = torch.cat(augment(*pair), dim=1)
    assert torch.equal(seen, expected)
    assert torch.equal(d_input_pair(condition, image), torch.cat(pair, dim=1))
    assert not torch.equal(seen, torch.cat(pair, dim=1))


@pytest.mark.parametrize("with_real", [False, True], ids=["adversarial", "feature matching"])
@pytest.mark.parametrize("conditional", [False, True], ids=["unconditional", "conditional"])
def test_the_generator_step_judges_augmented_fakes_and_reals_under_one_draw(conditional, with_real):
    """D = identity: its output is what it saw. The fake (and with feature matching the real)
    is augmented, with the condition, by one DiffAugment draw, as in D's own step."""
    torch.manual_seed(0)
    condition = torch.randn(4, 3, 16, 16) if conditional else None
    fake, real = torch.randn(4, 3, 16, 16), torch.randn(4, 3, 16, 16)
    augment = DiffAugment(p=1.0)
    torch.manual_seed(3)
    if with_real:
        fake_seen, real_seen = judge_fake_for_generator(nn.Identity(), condition, fake, real, augment, with_real=True)
    else:
        fake_seen, real_seen = judge_fake_for_generator(nn.Identity(), condition, fake, real, augment)
    torch.manual_seed(3)
    drawn = augment(*([condition] if conditional else []), fake, *([real] if with_real else []))
    condition_seen, images = (drawn[0], drawn[1:]) if conditional else (None, drawn)

    def as_seen(image):
        return image if condition_seen is None else torch.cat([condition_seen, image], dim=1)

    assert torch.equal(fake_seen, as_seen(images[0]))
    if with_real:
        assert torch.equal(real_seen, as_seen(images[1]))
    else:
        assert real_seen is None


def test_d_diagnostics_measure_the_spread_of_a_batch_of_fakes_only():
    torch.manual_seed(0)
    real_logits, fake_logits, fake = torch.randn(2, 1, 4, 4), torch.randn(2, 1, 4, 4), torch.randn(2, 1, 8, 8)
    logs = d_diagnostics(real_logits, fake_logits, fake, suffix="_a")  # one-channel fakes
    assert set(logs) == {"d_real_logit_a", "d_fake_logit_a", "fake_spread_a"}
    torch.testing.assert_close(logs["d_real_logit_a"], real_logits.mean())
    torch.testing.assert_close(logs["fake_spread_a"], fake.std(dim=0).mean())
    alone = d_diagnostics(real_logits[:1], fake_logits[:1], fake[:1])
    assert set(alone) == {"d_real_logit", "d_fake_logit"}  # the spread of one sample is NaN: not logged


# ----------------------------------------------------------------------------- DiffAugment


def test_diff_augment_is_differentiable_and_identity_at_p_0():
    torch.manual_seed(0)
    images = torch.randn(4, 3, 16, 16, requires_grad=True)
    (augmented,) = DiffAugment(p=1.0)(images)
    assert not torch.equal(augmented, images)
    weights = torch.randn_like(augmented)
    (augmented * weights).sum().backward()
    assert torch.isfinite(images.grad).all() and images.grad.abs().sum() > 0
    (unchanged,) = DiffAugment(p=0.0)(images)
    assert torch.equal(unchanged, images)


def test_diff_augment_applies_one_transform_to_a_conditional_pair():
    condition, image = torch.randn(4, 3, 16, 16), torch.randn(4, 3, 16, 16)
    augment = DiffAugment(p=0.7)
    torch.manual_seed(5)
    pair = augment(condition, image)
    torch.manual_seed(5)
    (condition_alone,) = augment(condition)
    torch.manual_seed(5)
    (image_alone,) = augment(image)
    assert torch.equal(pair[0], condition_alone) and torch.equal(pair[1], image_alone)
    same = augment(image, image.clone())
    assert torch.equal(same[0], same[1])


def diff_augment_by_hand(images, policy, p, translation=0.125, cutout=0.5):
    """DiffAugment's transforms sample by sample, with its random draws in its order (per policy:
    who is augmented, then the policy's parameters); the same images for every tensor given."""
    n, _, height, width = images[0].shape
    out = [x.clone() for x in images]
    if "color" in policy:
        chosen = torch.rand(n) < p
        brightness, saturation, contrast = (torch.rand(n) - 0.5), (torch.rand(n) * 2 - 1), (torch.rand(n) - 0.5)
        for x in out:
            for i in range(n):
                if chosen[i]:  # brightness +-0.5, saturation x [0, 2], contrast x [0.5, 1.5]
                    y = x[i] + brightness[i]
                    y = (y - y.mean(dim=0)) * (1 + saturation[i]) + y.mean(dim=0)
                    x[i] = (y - y.mean()) * (1 + contrast[i]) + y.mean()
    if "translation" in policy:
        chosen = torch.rand(n) < p
        max_dy, max_dx = math.floor(height * translation + 0.5), math.floor(width * translation + 0.5)
        dy, dx = torch.randint(-max_dy, max_dy + 1, (n,)), torch.randint(-max_dx, max_dx + 1, (n,))
        for k, x in enumerate(out):
            shifted = torch.zeros_like(x)
            for i in range(n):
                down, right = (int(dy[i]), int(dx[i])) if chosen[i] else (0, 0)
                shifted[i, :, max(down, 0):height + min(down, 0), max(right, 0):width + min(right, 0)] = \
                    x[i, :, max(-down, 0):height - max(down, 0), max(-right, 0):width - max(right, 0)]
            out[k] = shifted
    if "cutout" in policy:
        chosen = torch.rand(n) < p
        cut_h, cut_w = math.floor(height * cutout + 0.5), math.floor(width * cutout + 0.5)
        top, left = torch.randint(0, height - cut_h + 1, (n,)), torch.randint(0, width - cut_w + 1, (n,))
        for x in out:
            for i in range(n):
                if chosen[i]:
                    x[i, :, int(top[i]):int(top[i]) + cut_h, int(left[i]):int(left[i]) + cut_w] = 0
    return out


@pytest.mark.parametrize("policy", [["color"], ["translation"], ["cutout"], ["color", "translation", "cutout"]],
                         ids=lambda policy: "+".join(policy))
def test_diff_augment_equals_its_transforms_computed_by_hand(policy):
    """A conditional pair of 16 x 24 images, p = 0.6: some samples augmented, some not."""
    torch.manual_seed(0)
    pair = [torch.randn(6, 3, 16, 24), torch.randn(6, 3, 16, 24)]
    augment = DiffAugment(policy=policy, p=0.6)
    torch.manual_seed(11)
    ours = augment(*pair)
    torch.manual_seed(11)
    expected = diff_augment_by_hand(pair, policy, p=0.6)
    for mine, theirs in zip(ours, expected, strict=True):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-6)
    changed = [not torch.equal(ours[0][i], pair[0][i]) for i in range(6)]
    assert any(changed) and (len(policy) > 1 or not all(changed))  # some samples augmented, and others not


def test_translation_shifts_with_zeros_coming_in():
    image = torch.arange(2 * 1 * 5 * 6, dtype=torch.float32).view(2, 1, 5, 6)
    shifted = DiffAugment._translate(image, torch.tensor([1, -2]), torch.tensor([2, 0]), 2, 2)
    expected = torch.zeros_like(image)
    expected[0, :, 1:, 2:] = image[0, :, :-1, :-2]  # down 1, right 2
    expected[1, :, :-2, :] = image[1, :, 2:, :]     # up 2
    assert torch.equal(shifted, expected)


@pytest.mark.parametrize("sign, expected_p", [(1.0, 2 * 8 / 100), (-1.0, 0.0)])
def test_adaptive_p_rises_when_d_is_always_right_on_reals_and_falls_when_always_wrong(sign, expected_p):
    augment = DiffAugment(adaptive=True, target=0.6, interval=2, speed_images=100)
    verdicts = torch.full((8,), sign)
    for _ in range(2):
        augment.observe(verdicts)
    torch.testing.assert_close(augment.p, torch.tensor(expected_p))
    falling = DiffAugment(adaptive=True, interval=2, speed_images=100)
    falling.p.fill_(0.5)
    for _ in range(2):
        falling.observe(verdicts)
    torch.testing.assert_close(falling.p, torch.tensor(0.5 + (1 if sign > 0 else -1) * 0.16))


def test_adaptive_state_resumes_exactly():
    augment = DiffAugment(adaptive=True, interval=3, speed_images=100)
    for _ in range(4):  # one adjustment, then one observation toward the next
        augment.observe(torch.ones(8))
    restored = DiffAugment(adaptive=True, interval=3, speed_images=100)
    restored.load_state_dict(augment.state_dict())
    for module in (augment, restored):
        for _ in range(2):
            module.observe(torch.ones(8))
    assert torch.equal(augment.p, restored.p) and float(restored.p) == pytest.approx(2 * 24 / 100)


def test_loading_a_state_into_a_used_augment_counts_on_from_the_loaded_steps():
    """The D-step count lives in a python int as well (no device read per step): loading a state
    must replace it, or the next adjustment comes at the old module's step."""
    fresh = DiffAugment(adaptive=True, interval=3, speed_images=100).state_dict()
    augment = DiffAugment(adaptive=True, interval=3, speed_images=100)
    for _ in range(2):
        augment.observe(torch.ones(8))
    augment.load_state_dict(fresh)  # back to no step observed
    augment.observe(torch.ones(8))  # the first step: no adjustment (the old count would make it the third)
    assert float(augment.p) == 0.0 and int(augment.observed) == 1


def test_an_accumulated_d_step_adapts_p_once_from_the_verdicts_of_every_micro_batch():
    """With two micro-batches per iteration, `interval` counts D steps (iterations), not
    micro-batches, and p moves after the step, from the verdicts of both micro-batches."""
    torch.manual_seed(0)
    task = gan_task(d_augment={"type": "DiffAugment", "adaptive": True, "interval": 3, "speed_images": 100})
    optim = sgd_optimizers(task)
    augment = task.adversary.augment

    def micro_batches():
        return [{"image": torch.randint(0, 256, (4, 3, 8, 8), dtype=torch.uint8)} for _ in range(2)]

    for _ in range(2):
        task.train_iteration(micro_batches(), optim)
    assert int(augment.observed) == 2  # two D steps
    assert float(augment.sign_sum[1]) == 16  # every sample of both, no adjustment yet
    assert float(augment.p) == 0.0
    logs = task.train_iteration(micro_batches(), optim)  # the third D step adjusts p, from 24 samples
    assert int(augment.observed) == 3 and float(augment.sign_sum[1]) == 0
    assert float(augment.p) in (0.0, pytest.approx(24 / 100))  # sign(r_t - target) x 24 / 100, clipped
    assert torch.equal(logs["ada_p"], augment.p)


@pytest.mark.parametrize("kwargs, message", [
    ({"policy": ["colour"]}, r"policy: unknown 'colour'; did you mean 'color'\? \(choose from color, translation, cutout\)"),
    ({"policy": []}, "policy: name at least one of color, translation, cutout"),
    ({"p": 1.5}, r"p must be in \[0, 1\], got 1.5"),
    ({"target": 1.0}, r"target must be in \(0, 1\), got 1.0"),
    ({"target": 0.0}, r"target must be in \(0, 1\), got 0.0"),
    ({"interval": 0}, "interval must be a positive integer, got 0"),
    ({"interval": 2.0}, "interval must be a positive integer, got 2.0"),
    ({"speed_images": 0}, "speed_images must be positive, got 0"),
    ({"translation": 0.5000001}, r"translation must be a fraction of the side in \[0, 0.5\], got 0.5000001"),
    ({"cutout": 0.0}, r"cutout must be a fraction of the side in \(0, 1\], got 0.0"),
    ({"cutout": 1.0000001}, r"cutout must be a fraction of the side in \(0, 1\], got 1.0000001"),
])
def test_diff_augment_settings_are_checked(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        MODELS.build({"type": "DiffAugment", **kwargs}, path="task.d_augment")


def test_diff_augment_defaults_and_the_bounds_it_accepts():
    augment = DiffAugment()  # DiffAugment's policy at p 1; ADA's target, interval 4 and 20k images
    assert (augment.policy, float(augment.p), augment.target, augment.interval, augment.speed_images,
            augment.translation, augment.cutout) == (["color", "translation", "cutout"], 1.0, 0.6, 4, 20000, 0.125, 0.5)
    assert float(DiffAugment(adaptive=True, p=0.7).p) == 0.0  # ADA starts from no augmentation
    assert DiffAugment(policy="color").policy == ["color"]  # one name alone
    for kwargs in ({"p": 0.0}, {"p": 1.0}, {"interval": 1}, {"speed_images": 1}, {"translation": 0.0},
                   {"translation": 0.5}, {"cutout": 1.0}, {"target": 0.999}):
        DiffAugment(**kwargs)


def test_feature_matching_sees_real_and_fake_under_one_augmentation():
    from framework.tasks.discriminator_step import judge_fake_for_generator

    torch.manual_seed(0)
    network = MultiScaleDiscriminator(6, num_scales=2, base_channels=4, num_layers=2, norm="none")
    condition, image = torch.randn(3, 3, 32, 32), torch.randn(3, 3, 32, 32)
    fake_output, real_output = judge_fake_for_generator(network, condition, image, image.clone(), DiffAugment(p=1.0),
                                                        with_real=True)
    for fake_layers, real_layers in zip(fake_output.features, real_output.features):
        for fake, real in zip(fake_layers, real_layers):
            assert torch.equal(fake, real)
    assert real_output.logits[0].grad_fn is None  # the real pass keeps no graph


def pix2pix_patchgan(in_channels, width, layers):
    """pix2pix's PatchGAN written out (the official code's NLayerDiscriminator, instance norm
    without affine): the reference each scale of the multi-scale D must equal."""
    body, mult = [nn.Conv2d(in_channels, width, 4, 2, 1), nn.LeakyReLU(0.2)], 1
    for n in range(1, layers + 1):
        previous, mult = mult, min(2**n, 8)
        body += [nn.Conv2d(width * previous, width * mult, 4, 2 if n < layers else 1, 1),
                 nn.InstanceNorm2d(width * mult), nn.LeakyReLU(0.2)]
    return nn.Sequential(*body, nn.Conv2d(width * mult, 1, 4, 1, 1))


def test_each_scale_is_pix2pixs_patchgan_on_the_image_average_pooled_s_times():
    torch.manual_seed(0)
    multi = MultiScaleDiscriminator(in_channels=6, num_scales=3, base_channels=4, num_layers=4, norm="in")
    image = torch.randn(2, 6, 192, 192)  # the coarsest scale (48 pixels) keeps 2x2 maps through 4 layers
    with torch.no_grad():
        out = multi(image)
        pooled = image
        for scale, patch_gan in enumerate(multi.scales):
            reference = pix2pix_patchgan(6, 4, 4)
            for theirs, ours in zip(reference.parameters(), patch_gan.parameters(), strict=True):
                theirs.copy_(ours)  # same shapes in the same order, or zip/copy_ fails
            if scale:  # pix2pixHD's downsampling between scales
                pooled = F.avg_pool2d(pooled, 3, stride=2, padding=1, count_include_pad=False)
            torch.testing.assert_close(out.logits[scale], reference(pooled), rtol=1e-5, atol=1e-6)
            block_ends = [2, 5, 8, 11, 14]  # each block's output, after its LeakyReLU
            assert len(out.features[scale]) == len(block_ends)
            for feature, end in zip(out.features[scale], block_ends):
                torch.testing.assert_close(feature, reference[:end](pooled), rtol=1e-5, atol=1e-6)


def test_the_multi_scale_discriminators_defaults_and_batch_norm_without_conv_biases():
    default = MultiScaleDiscriminator()  # pix2pixHD's: 3 scales of 64-channel 3-layer PatchGANs, instance norm
    assert len(default.scales) == 3
    first, second = default.scales[0].blocks[0][0], default.scales[0].blocks[1]
    assert (first.in_channels, first.out_channels, len(default.scales[0].blocks)) == (6, 64, 4)
    assert isinstance(second[1], nn.InstanceNorm2d) and not second[1].affine
    with_bn = MultiScaleDiscriminator(num_scales=1, base_channels=4, num_layers=3, norm="bn").scales[0]
    assert [block[0].bias is None for block in with_bn.blocks] == [False, True, True, True]  # BN's shift replaces it


@pytest.mark.parametrize("keyword", ["num_scales", "num_layers"])
@pytest.mark.parametrize("value", [0, 1.5, "2"])
def test_scales_and_layers_are_positive_integers(keyword, value):
    with pytest.raises(ValueError, match=f"^{keyword} must be a positive integer, got {value!r}$"):
        MultiScaleDiscriminator(**{keyword: value})
