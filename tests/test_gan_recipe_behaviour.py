"""Behavioural fingerprints of the GAN recipes (issue 61, item 4): the numbers a training step
depends on and a parameter count cannot see, each against the official code named with its commit
in tests/data/behaviour/gan_recipes.json.

- OASIS's class-balanced N+1 cross-entropy of fixed logits and labels, class 0 included: the
  official formula (models/losses.py) written out again here in OASIS's own terms (one-hot map,
  "fake" as output 0), the recipe's loss built from its config, and literal pinned values;
- the multi-scale adversarial terms: pix2pixHD's LSGAN added up over its two scales (D's loss
  halved), SPADE's hinge averaged over them, with each recipe's d_weight and adv_weight;
- the learning rate at iterations 0, 1, mid and last and the effective batch of every GAN recipe;
- the precision the recipes train in (float32, as the official runs);
- OASIS's checkpoint selection: the best FID of the EMA generator, refused at start-up in one line
  where FID's network (torch-fidelity, the `.[fid]` extra, and its Inception file) is missing.
"""

from __future__ import annotations

import functools
import json
import math
import re
import sys

import pytest
import torch
import torch.nn.functional as F

from framework.config import load_config, to_plain
from framework.losses.gan import adversarial_loss
from framework.losses.oasis import class_balancing_weights
from framework.optim.schedulers import build_scheduler
from framework.registry import LOSSES
from support import REPO

DATA = json.loads((REPO / "tests/data/behaviour/gan_recipes.json").read_text())
OASIS = DATA["oasis_balanced_ce"]
RATES = DATA["learning_rate"]["recipes"]
BATCHES = DATA["effective_batch"]["recipes"]


@functools.cache  # each config resolved once (read only)
def plain(config: str) -> dict:
    return to_plain(load_config(str(REPO / config)))


def recipe_loss(config: str):
    """The adversarial loss a recipe config builds (a short name or a node)."""
    node = plain(config)["task"]["gan_loss"]
    return adversarial_loss(LOSSES.build(node, path="task.gan_loss") if isinstance(node, dict) else node)


def fixed_logits(*shape: int) -> torch.Tensor:
    """Logits without a random draw (the same on every torch): a sine over a ramp."""
    return (torch.linspace(-3.0, 3.0, math.prod(shape), dtype=torch.float64).reshape(shape) * 1.7).sin() * 2.5


def official_oasis_terms(logits: torch.Tensor, labels: torch.Tensor, classes: int,
                         dont_care: bool) -> tuple[float, float]:
    """(D's real term, D's fake term) as OASIS computes them: `logits` in this framework's order
    (classes, then "fake") are put in OASIS's ("fake" first); the class occurrences are the one-hot
    map's sums, label 0's zeroed with contain_dontcare_label before the present classes are counted;
    coefficient = numel(one-hot) / (present x channels x occurrence), 0 for label 0; the real term
    is the mean over every pixel of weight x CE towards class + 1, the fake term the plain mean CE
    towards output 0."""
    theirs = torch.cat([logits[:, -1:], logits[:, :-1]], dim=1)
    one_hot = F.one_hot(labels, classes).permute(0, 3, 1, 2).double()
    occurrence = one_hot.sum(dim=(0, 2, 3))
    if dont_care:
        occurrence[0] = 0
    present = (occurrence > 0).sum()
    coefficients = occurrence.reciprocal() * one_hot.numel() / (present * classes)
    if dont_care:
        coefficients[0] = 0
    real = (F.cross_entropy(theirs, labels + 1, reduction="none") * coefficients[labels]).mean()
    fake = F.cross_entropy(theirs, torch.zeros_like(labels), reduction="none").mean()
    return real.item(), fake.item()


def test_the_issue_repro_weighs_the_dont_care_class_zero_and_balances_the_rest():
    labels = torch.tensor([OASIS["issue_repro"]["labels_rows"]])
    weights = class_balancing_weights(labels, OASIS["issue_repro"]["num_classes"], dont_care_class=0)
    assert weights[0, :, 0].tolist() == OASIS["issue_repro"]["weights_first_column"]


@pytest.mark.parametrize("config", ["configs/synthesis/oasis_cityscapes.yaml", "configs/synthesis/oasis_ade20k.yaml"])
def test_oasis_recipes_balanced_ce_is_the_official_with_class_0_unweighted(config):
    labels, classes = torch.tensor(OASIS["labels"]), OASIS["num_classes"]
    logits = fixed_logits(labels.shape[0], classes + 1, *labels.shape[1:])
    loss = recipe_loss(config)
    real, fake = loss.discriminator(logits, logits, labels)
    official_real, official_fake = official_oasis_terms(logits, labels, classes, dont_care=True)
    assert real.item() == pytest.approx(official_real, rel=1e-6)
    assert real.item() == pytest.approx(OASIS["pinned"]["real_with_dont_care_0"], rel=1e-6)
    assert fake.item() == pytest.approx(official_fake, rel=1e-6)
    assert fake.item() == pytest.approx(OASIS["pinned"]["fake"], rel=1e-6)
    # G's adversarial term is the same balanced CE on D(fake) (models/models.py, for_real=True)
    assert loss.generator(logits, labels).item() == pytest.approx(official_real, rel=1e-6)


def test_oasis_textures_keeps_every_class_supervised():
    labels, classes = torch.tensor(OASIS["labels"]), OASIS["num_classes"]
    logits = fixed_logits(labels.shape[0], classes + 1, *labels.shape[1:])
    real, _ = recipe_loss("configs/synthesis/oasis_textures.yaml").discriminator(logits, logits, labels)
    assert real.item() == pytest.approx(official_oasis_terms(logits, labels, classes, dont_care=False)[0], rel=1e-6)
    assert real.item() == pytest.approx(OASIS["pinned"]["real_every_class"], rel=1e-6)


def official_multiscale(form: str, over_scales: str, real: list, fake: list) -> tuple[float, float, float]:
    """(D real, D fake, G) of the official GANLoss over a list of per-scale logit maps."""
    terms = {"lsgan": (lambda x: (x - 1).pow(2).mean(), lambda x: x.pow(2).mean(), lambda x: (x - 1).pow(2).mean()),
             "hinge": (lambda x: F.relu(1 - x).mean(), lambda x: F.relu(1 + x).mean(), lambda x: -x.mean())}[form]
    combine = sum if over_scales == "sum" else (lambda values: sum(values) / len(values))
    return (combine([terms[0](x) for x in real]).item(), combine([terms[1](x) for x in fake]).item(),
            combine([terms[2](x) for x in fake]).item())


@pytest.mark.parametrize("recipe", sorted(DATA["multiscale_adversarial"]))
def test_multiscale_adversarial_terms_are_the_official(recipe):
    entry = DATA["multiscale_adversarial"][recipe]
    task = plain(entry["config"])["task"]
    real = [fixed_logits(1, 1, 8, 8), fixed_logits(1, 1, 4, 4) * 0.5 + 0.3]
    fake = [fixed_logits(1, 1, 8, 8).flip(-1) - 0.4, fixed_logits(1, 1, 4, 4) * -0.7]
    loss = recipe_loss(entry["config"])
    d_real, d_fake = loss.discriminator(real, fake)
    official_real, official_fake, official_g = official_multiscale(entry["form"], entry["over_scales"], real, fake)
    d_weight = 0.5 if recipe == "pix2pixhd" else 1.0  # pix2pixHD: loss_D = (D_fake + D_real) * 0.5; SPADE: the sum
    assert task["d_weight"] * (d_real + d_fake).item() == pytest.approx(d_weight * (official_real + official_fake))
    assert task["adv_weight"] * loss.generator(fake).item() == pytest.approx(official_g)
    if recipe == "pix2pixhd":  # two scales summed: twice their mean, against FM 10 and VGG 10
        assert task["feature_matching"]["weight"] == 10.0 and task["perceptual"]["weight"] == 10.0
        assert loss.generator(fake).item() == pytest.approx(2 * official_multiscale("lsgan", "mean", real, fake)[2])


def official_lr(entry: dict, base: float, iteration: int) -> float:
    if entry["schedule"] == "constant":
        return base
    epoch = iteration // entry["iterations_per_epoch"]
    if entry["schedule"] == "epoch_linear":
        return base * (1 - max(0, epoch - entry["niter"]) / entry["niter_decay"])
    return base * (1 - max(0, epoch + 1 - entry["niter"]) / (entry["niter_decay"] + 1))


def framework_lrs(optimizer_node: dict, max_iters: int, iterations: list[int]) -> list[float]:
    """The learning rate the recipe's optimizer has at each iteration (its scheduler's closed form
    at that step; stepped for real for 0 and 1)."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=optimizer_node["lr"])
    if "scheduler" not in optimizer_node:
        return [optimizer.param_groups[0]["lr"] for _ in iterations]
    scheduler = build_scheduler(optimizer_node["scheduler"], optimizer, max_iters, "scheduler")
    stepped = [optimizer.param_groups[0]["lr"]]
    optimizer.step()
    scheduler.step()
    stepped.append(optimizer.param_groups[0]["lr"])
    rates = []
    for iteration in iterations:
        scheduler.last_epoch = iteration
        rates.append(scheduler.get_lr()[0])
    assert rates[:2] == pytest.approx(stepped)
    return rates


@pytest.mark.parametrize("recipe", sorted(RATES))
def test_learning_rate_at_0_1_mid_and_last_is_the_official_within_one_epochs_step(recipe):
    entry, cfg = RATES[recipe], plain(RATES[recipe]["config"])
    max_iters = cfg["train"]["max_iters"]
    iterations = [0, 1, max_iters // 2, max_iters - 1]
    for name, base in entry["official_lr"].items():
        ours = framework_lrs(cfg["optimizers"][name], max_iters, iterations)
        theirs = [official_lr(entry, base, iteration) for iteration in iterations]
        assert ours[:2] == pytest.approx(theirs[:2], rel=1e-12), (name, ours, theirs)
        step = 0.0 if entry["schedule"] == "constant" else base / entry["niter_decay"]
        for iteration, mine, official in zip(iterations, ours, theirs):
            assert abs(mine - official) <= step * (1 + 1e-9), (name, iteration, mine, official)
        if entry["schedule"] != "constant":  # the framework's own curve: constant to the middle, ~0 at the end
            assert ours[2] == base and ours[3] == pytest.approx(base / (max_iters - max_iters // 2), rel=1e-9)


def header_processes(config: str) -> int:
    found = re.search(r"--nproc_per_node=(\d+)", (REPO / config).read_text())
    return int(found.group(1)) if found else 1


@pytest.mark.parametrize("recipe", sorted(BATCHES))
def test_effective_batch_is_the_official(recipe):
    config = RATES[recipe]["config"]
    cfg = plain(config)
    effective = cfg["data"]["train"]["batch_size"] * header_processes(config) * cfg["train"]["accumulate"]
    assert effective == BATCHES[recipe]["batch"]


@pytest.mark.parametrize("recipe", sorted(RATES))
def test_recipes_train_in_float32_as_the_official_runs(recipe):
    assert plain(RATES[recipe]["config"])["amp"]["enabled"] is False


@pytest.mark.parametrize("gan_loss, key", [
    ({"type": "OASISLoss", "dont_care_class": 3}, "gan_loss.dont_care_class"),   # the task has classes 0..2
    ({"type": "OASISLoss", "dont_care_class": -1}, "dont_care_class"),
    ({"type": "LSGANLoss", "scales": "median"}, "scales"),
])
def test_a_bad_dont_care_class_or_scale_reduction_is_refused_in_one_line(gan_loss, key):
    from test_synthesis_task import CLASSES, generator, patch_discriminator, segmenter_discriminator

    from framework.errors import ConfigError
    from framework.registry import TASKS

    assert CLASSES == 3
    discriminator = segmenter_discriminator() if gan_loss["type"] == "OASISLoss" else patch_discriminator()
    node = {"type": "SemanticSynthesisTask", "generator": generator(), "discriminator": discriminator,
            "num_classes": CLASSES, "gan_loss": gan_loss}
    with pytest.raises(ConfigError) as refused:
        TASKS.build(node, path="task")
    assert key in str(refused.value) and "\n" not in str(refused.value)


OASIS_CONFIGS = ["configs/synthesis/oasis_cityscapes.yaml", "configs/synthesis/oasis_ade20k.yaml"]
FID_EVERY = {"configs/synthesis/oasis_cityscapes.yaml": 2500,  # OASIS config.py: freq_fid, cityscapes
             "configs/synthesis/oasis_ade20k.yaml": 5000}      # its default


@pytest.mark.parametrize("config", OASIS_CONFIGS)
def test_oasis_recipes_keep_the_checkpoint_of_the_lowest_fid_at_oasis_intervals(config):
    cfg = plain(config)
    assert cfg["train"]["best_metric"] == "FID" and cfg["train"]["best_mode"] == "min"
    assert cfg["train"]["val_interval"] == FID_EVERY[config]
    fid = cfg["metrics"][0]
    assert fid["type"] == "FID" and fid.get("extractor", "fid-inception") == "fid-inception"
    assert cfg["task"]["ema_decay"] is not None  # evaluated: the EMA generator (next test)


def test_evaluation_reads_the_ema_generator_not_the_live_one():
    from test_synthesis_task import CLASSES, batch, generator, segmenter_discriminator

    from framework.tasks.synthesis import SemanticSynthesisTask

    torch.manual_seed(0)
    task = SemanticSynthesisTask(generator(), segmenter_discriminator(), CLASSES, gan_loss="oasis",
                                 ema_decay=0.9, ema_bn_batches=0).eval()
    with torch.no_grad():
        for parameter in task.generator.parameters():
            parameter.add_(0.5)  # the live generator moves; the EMA has not followed
        data = batch()
        fake = task.val_step(data)["fake"]
        one_hot, noise = task.label_input(data), task.evaluation_noise(data["index"])
        ema = (task.ema["generator"](one_hot, noise) + 1) / 2
        live = (task.generator(one_hot, noise) + 1) / 2
    torch.testing.assert_close(fake, ema)
    assert (fake - live).abs().mean() > 1e-3


@pytest.mark.parametrize("config", OASIS_CONFIGS)
def test_a_recipe_asking_for_fid_without_its_network_is_refused_at_start_up_in_one_line(config, tmp_path,
                                                                                        monkeypatch):
    from framework.engine.build import build_hooks
    from framework.errors import ConfigError

    missing = tmp_path / "weights-inception-2015-12-05-6726825d.pth"
    cfg = to_plain(load_config(str(REPO / config), [f"metrics.0.weights_path={missing}"]))
    with pytest.raises(ConfigError) as refused:
        build_hooks(cfg, None)  # build_trainer's start-up, before the first iteration or file
    assert "metrics[0]" in str(refused.value) and "weights_path" in str(refused.value)
    assert str(missing) in str(refused.value) and "\n" not in str(refused.value)
    torch.save({}, missing)
    monkeypatch.setitem(sys.modules, "torch_fidelity", None)  # the `.[fid]` extra not installed
    with pytest.raises(ConfigError) as refused:
        build_hooks(cfg, None)
    assert "torch-fidelity" in str(refused.value) and "[fid]" in str(refused.value) and "\n" not in str(refused.value)


def fidelity_cell(deviations: int) -> str:
    return f"listed differences ({deviations} on the card)" if deviations else "identical"


@pytest.mark.parametrize("recipe", sorted(RATES))
def test_recipes_table_states_each_gan_recipes_fidelity_as_its_card(recipe):
    import yaml

    card = yaml.safe_load((REPO / f"docs/recipes/{recipe}.yaml").read_text())
    rows = [line for line in (REPO / "docs/recipes.md").read_text().splitlines()
            if line.startswith("| ") and f"(recipes/{recipe}.yaml)" in line]
    assert len(rows) == 1, rows
    assert rows[0].rstrip(" |").rsplit("|", 1)[1].strip() == fidelity_cell(len(card["deviations"]))


@pytest.mark.parametrize("config", OASIS_CONFIGS)
def test_oasis_recipes_draw_one_labelmix_coin_per_class_for_the_batch(config):
    from framework.losses.oasis import labelmix_mask

    coin = plain(config)["task"]["labelmix_coin"]
    assert coin == "batch"  # OASIS models/models.py generate_labelmix: a coin per class of the batch's label map
    labels = torch.tensor([[[0, 1], [2, 2]], [[2, 1], [1, 0]], [[1, 1], [0, 2]]])
    for seed in range(8):
        mask = labelmix_mask(labels, 3, generator=torch.Generator().manual_seed(seed), per_image=coin == "image")[:, 0]
        for label in range(3):
            assert mask[labels == label].unique().numel() == 1, (seed, label)  # one value across the images
    per_image = [labelmix_mask(labels, 3, generator=torch.Generator().manual_seed(seed))[:, 0] for seed in range(8)]
    assert any(mask[labels == 1].unique().numel() == 2 for mask in per_image)  # textures: a coin per image
    from framework.registry import TASKS

    textures = TASKS.build(plain("configs/synthesis/oasis_textures.yaml")["task"], path="task")
    assert textures.labelmix_coin == "image"  # the task's default, which the textures config keeps


def test_a_bad_labelmix_coin_is_refused_in_one_line():
    from test_synthesis_task import CLASSES, generator, segmenter_discriminator

    from framework.errors import ConfigError
    from framework.registry import TASKS

    node = {"type": "SemanticSynthesisTask", "generator": generator(), "discriminator": segmenter_discriminator(),
            "num_classes": CLASSES, "gan_loss": "oasis", "labelmix_weight": 5.0, "labelmix_coin": "pixel"}
    with pytest.raises(ConfigError) as refused:
        TASKS.build(node, path="task")
    assert "labelmix_coin" in str(refused.value) and "'pixel'" in str(refused.value)


@pytest.mark.parametrize("part", ["generator.network", "discriminator"])
def test_pix2pixhd_recipe_leaves_conv_biases_as_pytorch_draws_them(part):
    """pix2pixHD models/networks.py weights_init redraws conv weights N(0, 0.02) and leaves each bias
    at PyTorch's default, uniform in +-1/sqrt(fan_in); pix2pix's init_weights zeroes them."""
    import projects.pix2pix  # noqa: F401  (registers ResnetGenerator)
    from framework.registry import MODELS

    node = plain("projects/pix2pix/configs/pix2pixhd_cityscapes.yaml")["task"]
    for key in part.split("."):
        node = node[key]
    node = {**node, "base_channels": 4} | ({"num_blocks": 1} if "num_blocks" in node else {})
    torch.manual_seed(0)
    convs = [layer for layer in MODELS.build(node).modules() if isinstance(layer, (torch.nn.Conv2d,
                                                                                     torch.nn.ConvTranspose2d))]
    for conv in convs:
        fan_in = torch.nn.init._calculate_fan_in_and_fan_out(conv.weight)[0]
        assert conv.bias.abs().max() <= fan_in ** -0.5 and conv.bias.abs().max() > 0.1 * fan_in ** -0.5
        assert conv.weight.std().item() == pytest.approx(0.02, rel=0.5)
    zeroed = MODELS.build({**node, "weight_init": {"scheme": "normal", "gain": 0.02}})
    assert all(not layer.bias.any() for layer in zeroed.modules() if isinstance(layer, torch.nn.Conv2d))


@pytest.mark.parametrize("value", [{"scheme": "normal", "biases": "random"}, {"scheme": "default", "biases": "default"}])
def test_a_bad_weight_init_biases_is_refused_naming_the_key(value):
    from framework.errors import ConfigError
    from framework.registry import MODELS

    node = {"type": "MultiScaleDiscriminator", "in_channels": 4, "num_scales": 1, "base_channels": 4, "num_layers": 1}
    with pytest.raises(ConfigError, match=r"task\.discriminator\.weight_init\.biases: expected zero or default"):
        MODELS.build({**node, "weight_init": value}, path="task.discriminator")
