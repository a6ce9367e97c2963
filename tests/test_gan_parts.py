"""The GAN parts on their own and in CycleGAN, which gained what GANTask had: the EMA's copy
phase at its boundary, adversarial losses as registry entries (a user's own, a non-adversarial
entry refused), what a loss declares (a gradient penalty, whether D's loss is watched), and
feature matching, the perceptual loss and WGAN-GP by config in CycleGAN, against hand-written
terms."""

import copy
import re

import pytest
import torch
from test_cyclegan import generator
from test_cyclegan_toolkit import lsgan, sgd, signed
from torch import nn

import framework  # noqa: F401  (fills the registries)
from framework.errors import ConfigError
from framework.losses.feature_matching import FeatureMatchingLoss
from framework.losses.gan import AdversarialLoss, HingeGANLoss, WGANGPLoss, adversarial_loss
from framework.models.discriminators import MultiScaleDiscriminator
from framework.registry import TASKS
from framework.tasks.adversary import Adversary
from framework.tasks.cyclegan import CycleGANTask
from framework.tasks.ema import EMA
from support import named


class Shift(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1))
        self.register_buffer("seen", torch.zeros(1))


@pytest.mark.parametrize("start", [0, 2])
def test_the_ema_copies_for_exactly_start_updates_then_averages(start):
    network = Shift()
    ema = EMA({"net": network}, decay=0.5, start=start)
    expected = 0.0
    for update in range(1, 5):
        with torch.no_grad():
            network.weight.fill_(10.0 * update)
            network.seen.fill_(update)
        ema.update({"net": network})
        expected = 10.0 * update if update <= start else 0.5 * expected + 0.5 * 10.0 * update
        assert float(ema["net"].weight) == expected, update
        assert float(ema["net"].seen) == update  # buffers are copied as they are
    assert ema.updates.value == 4 and not ema["net"].weight.requires_grad


def test_the_ema_count_is_checkpointed_and_the_copy_phase_resumes_from_it():
    network = Shift()
    ema = EMA({"net": network}, decay=0.5, start=2)
    ema.update({"net": network})
    restored = EMA({"net": Shift()}, decay=0.5, start=2)
    restored.load_state_dict(ema.state_dict())
    assert restored.updates.value == 1
    with torch.no_grad():
        network.weight.fill_(4.0)
    restored.update({"net": network})  # update 2: still a copy
    assert float(restored["net"].weight) == 4.0
    with torch.no_grad():
        network.weight.fill_(8.0)
    restored.update({"net": network})  # update 3: the first average
    assert float(restored["net"].weight) == 6.0


@pytest.mark.parametrize("decay, averages", [(0.9, [1.0, 2.9, 5.61]), (0.999, [0.01, 0.02999, 0.05996001])])
def test_the_ema_moves_by_one_minus_decay_towards_the_network(decay, averages):
    """From 0, a network at 10, 20, 30: 0.1 x 10 = 1, 0.9 x 1 + 0.1 x 20 = 2.9, 0.9 x 2.9 + 0.1 x 30
    = 5.61 at decay 0.9 (at 0.5, the only decay tested before, decay and 1 - decay are one)."""
    network, seen = Shift(), []
    ema = EMA({"net": network}, decay=decay)
    for value in (10.0, 20.0, 30.0):
        with torch.no_grad():
            network.weight.fill_(value)
        ema.update({"net": network})
        seen.append(float(ema["net"].weight))
    assert seen == pytest.approx(averages, rel=1e-5)


def test_cyclegan_ema_start_copies_both_generators_through_that_iteration():
    torch.manual_seed(0)
    task = CycleGANTask(generator(), generator(), *(nn.Conv2d(3, 1, 3) for _ in range(2)), ema_decay=0.5,
                        ema_start=1, pool_size=0)
    optim = sgd(task)
    batch = {side: torch.randint(0, 256, (2, 3, 8, 8), dtype=torch.uint8) for side in "ab"}
    task.train_iteration([batch], optim)
    for name in ("generator_ab", "generator_ba"):  # iteration 1 <= ema_start: copies
        for a, b in zip(task.ema[name].parameters(), getattr(task, name).parameters()):
            assert torch.equal(a, b), name
    before = {name: [p.clone() for p in task.ema[name].parameters()] for name in ("generator_ab", "generator_ba")}
    task.train_iteration([batch], optim)
    for name, old in before.items():  # iteration 2: halfway between the old average and the generator
        for average, previous, current in zip(task.ema[name].parameters(), old, getattr(task, name).parameters()):
            torch.testing.assert_close(average, 0.5 * previous + 0.5 * current, msg=named(name))


def test_a_loss_is_named_by_its_short_name_its_entry_or_a_node():
    assert type(adversarial_loss("hinge")) is HingeGANLoss
    assert type(adversarial_loss("HingeGANLoss")) is HingeGANLoss
    built = TASKS.build({"type": "CycleGANTask", "generator_ab": generator(), "generator_ba": generator(),
                         "discriminator_a": nn.Conv2d(3, 1, 3), "discriminator_b": nn.Conv2d(3, 1, 3),
                         "gan_loss": {"type": "WGANGPLoss"}}, path="task")
    assert type(built.adversary_a.loss) is WGANGPLoss and type(built.adversary_b.loss) is WGANGPLoss


def test_a_loss_that_is_not_adversarial_is_refused_naming_it():
    with pytest.raises(ValueError, match="gan_loss: 'DiceLoss' is a loss, but not an adversarial one"):
        adversarial_loss("DiceLoss")


class Unbounded(AdversarialLoss):
    bounded_below = False

    def on_real(self, logits):
        return -logits.mean()

    def on_fake(self, logits):
        return logits.mean()

    def for_generator(self, logits):
        return -logits.mean()


@pytest.mark.parametrize("loss, watched", [(HingeGANLoss(), True), (Unbounded(), False), (WGANGPLoss(), False)])
def test_what_a_loss_declares_decides_the_health_watch(loss, watched):
    adversary = Adversary(loss)
    logged = {"loss_d": -5.0 if not watched else 1e-3, "d_real_logit": 1.0, "d_fake_logit": -1.0}
    warnings = [adversary.diagnose(logged) for _ in range(3)][-1]
    assert bool(warnings) is watched


def test_a_loss_that_needs_a_gradient_penalty_gets_it_in_cyclegan():
    torch.manual_seed(0)
    task = CycleGANTask(generator(), generator(), nn.Conv2d(3, 1, 3), nn.Conv2d(3, 1, 3), gan_loss="wgan-gp",
                        gp_weight=3.0, pool_size=0)
    assert task.uses_double_backward  # so the engine refuses SyncBatchNorm for it
    batch = {side: torch.randint(0, 256, (2, 3, 8, 8), dtype=torch.uint8) for side in "ab"}
    logs = task.train_iteration([batch], sgd(task))
    assert logs["loss_d_gp_a"] > 0 and logs["loss_d_gp_b"] > 0
    total = logs["loss_d_real_a"] + logs["loss_d_fake_a"] + logs["loss_d_gp_a"]
    torch.testing.assert_close(logs["loss_d_a"], total)


def multi_scale():
    return MultiScaleDiscriminator(3, num_scales=2, base_channels=4, num_layers=2, norm="none")


def test_cyclegan_feature_matching_and_perceptual_terms_equal_the_terms_by_hand():
    """Feature matching compares D_b's features on G_ab(a) and on b (and D_a's on G_ba(b) and a);
    the perceptual loss compares each reconstruction with its original."""
    torch.manual_seed(0)
    nets = [generator(), generator(), multi_scale(), multi_scale()]
    g_ab, g_ba, d_a, d_b = copy.deepcopy(nets)
    perceptual = TASKS.build({"type": "CycleGANTask", "generator_ab": generator(), "generator_ba": generator(),
                              "discriminator_a": multi_scale(), "discriminator_b": multi_scale(),
                              "perceptual": {"type": "VGGPerceptualLoss", "arch": "vgg16", "weights": "random",
                                             "layers": {"relu1_1": 1.0}}}, path="task").perceptual
    task = CycleGANTask(*nets, identity_weight=0.0, pool_size=0, feature_matching=FeatureMatchingLoss(10.0),
                        perceptual=perceptual)
    batch = {side: torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8) for side in "ab"}
    logs = task.train_iteration([batch], sgd(task))
    matching = FeatureMatchingLoss(10.0)
    a, b = signed(batch)
    with torch.no_grad():  # the networks as the G step saw them
        fake_b, fake_a = g_ab(a), g_ba(b)
        expected = {"loss_g_fm_ab": matching(d_b(fake_b), d_b(b)), "loss_g_fm_ba": matching(d_a(fake_a), d_a(a)),
                    "loss_vgg_a": perceptual(g_ba(fake_b), a), "loss_vgg_b": perceptual(g_ab(fake_a), b),
                    "loss_g_ab": sum(lsgan(logits, 1) for logits in d_b(fake_b).logits) / 2}
    assert all(value > 1e-4 for value in expected.values())
    for key, value in expected.items():
        torch.testing.assert_close(logs[key], value, rtol=1e-4, atol=1e-7, msg=named(key))
    terms = ("loss_g_ab", "loss_g_ba", "loss_g_fm_ab", "loss_g_fm_ba", "loss_cycle_a", "loss_cycle_b",
             "loss_vgg_a", "loss_vgg_b")
    torch.testing.assert_close(logs["loss_g"], sum(logs[key] for key in terms), rtol=1e-5, atol=1e-6)


def test_feature_matching_with_a_discriminator_without_features_is_one_line():
    task = CycleGANTask(generator(), generator(), nn.Conv2d(3, 1, 3), nn.Conv2d(3, 1, 3), pool_size=0,
                        feature_matching=FeatureMatchingLoss(10.0))
    batch = {side: torch.randint(0, 256, (2, 3, 8, 8), dtype=torch.uint8) for side in "ab"}
    with pytest.raises(ValueError, match="feature matching needs the discriminator's intermediate features"):
        task.train_iteration([batch], sgd(task))


def test_nan_weights_are_refused_naming_the_key():
    for key in ("d_weight", "adv_weight", "gp_weight"):
        with pytest.raises(ValueError, match=f"^{key} must be a finite number >= 0, got nan$"):
            Adversary("hinge", **{key: float("nan")})
    with pytest.raises(ConfigError, match=r"task \(GANTask\): l1_weight must be a finite number >= 0, got inf"):
        TASKS.build({"type": "GANTask", "generator": generator(), "discriminator": nn.Conv2d(6, 1, 3),
                     "l1_weight": float("inf")}, path="task")


@pytest.mark.parametrize("task_type", ["GANTask", "CycleGANTask"])
def test_a_loss_that_reads_labels_is_refused_where_batches_have_none(task_type):
    networks = ({"generator": generator(), "discriminator": nn.Conv2d(6, 1, 3)} if task_type == "GANTask" else
                {"generator_ab": generator(), "generator_ba": generator(), "discriminator_a": nn.Conv2d(3, 1, 3),
                 "discriminator_b": nn.Conv2d(3, 1, 3)})
    with pytest.raises(ConfigError, match=rf"task \({task_type}\): gan_loss: OASISLoss reads a label map, which this "
                                          r"task's batches do not have \(SemanticSynthesisTask's do\)"):
        TASKS.build({"type": task_type, "gan_loss": "oasis", **networks}, path="task")


@pytest.mark.parametrize("decay, start, message", [
    (1.0, 0, "ema_decay must be in [0, 1) or null, got 1.0"), (True, 0, "ema_decay must be in [0, 1) or null, got True"),
    (-0.1, 0, "ema_decay must be in [0, 1) or null, got -0.1"), (0.5, -1, "ema_start must be an integer >= 0, got -1"),
    (0.5, 1.5, "ema_start must be an integer >= 0, got 1.5"), (0.5, True, "ema_start must be an integer >= 0, got True"),
])
def test_the_ema_refuses_a_decay_or_start_outside_its_range(decay, start, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        EMA({"net": Shift()}, decay=decay, start=start)
    assert EMA({"net": Shift()}, decay=0.0, start=0).decay == 0.0  # the lower ends are accepted


def test_the_adversarys_defaults_and_its_first_d_loss_before_any_step():
    adversary = Adversary()
    assert (adversary.loss.name, adversary.d_weight, adversary.adv_weight, adversary.gp_weight, adversary.r1.weight,
            adversary.r1.interval, adversary.d_steps.value) == ("vanilla", 1.0, 1.0, 10.0, 0.0, 1, 0)
    penalised = Adversary(r1_weight=1.0)
    real, fake = torch.rand(2, 3, 8, 8), torch.rand(2, 3, 8, 8)
    _, logs = penalised.d_loss(nn.Conv2d(3, 1, 3), real, fake)  # no D step counted yet: no R1 due
    assert "loss_d_r1" not in logs and {"d_real_logit", "d_fake_logit", "fake_spread"} <= set(logs)  # details by default
    penalised.start_d_step()
    _, logs = penalised.d_loss(nn.Conv2d(3, 1, 3), real, fake, details=False)
    assert "loss_d_r1" in logs and "d_real_logit" not in logs


def test_a_task_with_labels_must_give_them_to_a_loss_that_reads_them():
    adversary = Adversary("oasis", has_labels=True)
    with pytest.raises(ValueError, match="^OASISLoss reads the label map, which this task does not give it$"):
        adversary.d_loss(nn.Conv2d(3, 4, 3), torch.rand(1, 3, 8, 8), torch.rand(1, 3, 8, 8))
    with pytest.raises(ValueError, match="^d_weight must be a finite number >= 0, got True$"):
        Adversary(d_weight=True)


def test_a_regularizer_gets_ds_outputs_on_the_reals_and_the_fakes():
    seen = {}

    def regularizer(real_output, fake_output):
        seen["real"], seen["fake"] = real_output, fake_output
        return {"loss_d_extra": real_output.mean() * 0 + 2.0}

    discriminator = nn.Conv2d(3, 1, 3)
    real, fake = torch.rand(2, 3, 8, 8), torch.rand(2, 3, 8, 8) + 5
    loss, logs = Adversary("lsgan").d_loss(discriminator, real, fake, regularizer=regularizer)
    torch.testing.assert_close(seen["real"], discriminator(real))
    torch.testing.assert_close(seen["fake"], discriminator(fake))
    torch.testing.assert_close(loss, logs["loss_d_real"] + logs["loss_d_fake"] + 2.0)


def test_the_oasis_loss_skips_its_own_ignore_index():
    from framework.losses.gan import OASISLoss
    from framework.losses.oasis import class_balanced_ce, fake_class_ce

    torch.manual_seed(0)
    real, fake = torch.randn(2, 4, 6, 6), torch.randn(2, 4, 6, 6)
    labels = torch.randint(0, 3, (2, 6, 6))
    labels[:, :2] = 7  # don't-care under ignore_index 7 (255 is the default)
    loss = OASISLoss(ignore_index=7)
    loss_real, loss_fake = loss.discriminator(real, fake, labels)
    torch.testing.assert_close(loss_real, class_balanced_ce(real, labels, 7))
    torch.testing.assert_close(loss_fake, fake_class_ce(fake, labels, 7))
    torch.testing.assert_close(loss.generator(fake, labels), class_balanced_ce(fake, labels, 7))
    assert not torch.allclose(loss_fake, fake_class_ce(fake, labels.clamp(max=2), 7))  # the 7s were skipped


def test_a_gan_loss_of_another_kind_is_one_line():
    with pytest.raises(ValueError, match="^gan_loss: expected a GAN loss name or an AdversarialLoss node, got int$"):
        adversarial_loss(3)


@pytest.mark.parametrize("name", ["vanilla", "lsgan", "hinge", "wgan-gp"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_adversarial_terms_of_half_precision_logits_are_float32(name, dtype):
    """Under autocast D's logits are bfloat16 or float16; each term is computed on them in float32
    (a bfloat16 hinge loss moves in steps of 1/128 near 2; a float16 logit of 300 squared overflows)."""
    loss = adversarial_loss(name)
    logits = [torch.linspace(-300.0, 300.0, 64).view(1, 1, 8, 8).to(dtype), torch.randn(1, 1, 4, 4).to(dtype)]
    output = MultiScaleOutput(logits)
    with torch.autocast("cpu", dtype=dtype):
        terms = (*loss.discriminator(output, output), loss.generator(output))
    with torch.autocast("cpu", enabled=False):
        expected = (*loss.discriminator(MultiScaleOutput([x.float() for x in logits]),
                                        MultiScaleOutput([x.float() for x in logits])),
                    loss.generator(MultiScaleOutput([x.float() for x in logits])))
    for term, reference in zip(terms, expected):
        assert term.dtype == torch.float32 and torch.isfinite(term)
        torch.testing.assert_close(term, reference, atol=0, rtol=0)


class MultiScaleOutput:
    def __init__(self, logits):
        self.logits = logits
