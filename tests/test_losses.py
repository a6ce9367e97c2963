import math

import pytest
import torch
import torch.nn.functional as F

from framework.errors import ConfigError
from framework.losses import BCEWithLogitsLoss, CombinedLoss, CrossEntropyLoss, DiceLoss, cross_entropy
from framework.registry import LOSSES

IGNORE = 255


def multiclass_batch(num_classes=4, seed=0):
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(2, num_classes, 8, 8, generator=generator, requires_grad=True)
    target = torch.randint(0, num_classes, (2, 8, 8), generator=generator)
    target[0, :3] = IGNORE
    return logits, target


def binary_batch(seed=0):
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(2, 1, 8, 8, generator=generator, requires_grad=True)
    target = torch.randint(0, 2, (2, 8, 8), generator=generator)
    target[1, :, :2] = IGNORE
    return logits, target


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"weight": [1.0, 2.0, 0.5, 3.0]}, {"label_smoothing": 0.1}, {"weight": [1.0, 2.0, 0.5, 3.0], "label_smoothing": 0.2}],
)
def test_cross_entropy_matches_functional(kwargs):
    logits, target = multiclass_batch()
    weight = torch.tensor(kwargs["weight"]) if "weight" in kwargs else None
    expected = F.cross_entropy(
        logits, target, weight=weight, ignore_index=IGNORE, label_smoothing=kwargs.get("label_smoothing", 0.0)
    )
    loss = CrossEntropyLoss(**kwargs)
    assert loss.name == "ce"
    torch.testing.assert_close(loss(logits, target), expected)


def take_the_gpu_path(monkeypatch):
    """CrossEntropyLoss's mean as on a GPU (no value read back), computed on the CPU."""
    monkeypatch.setattr(cross_entropy, "_nll_mean", cross_entropy._nll_mean_without_sync)


@pytest.mark.parametrize("path", ["cpu", "gpu"])
@pytest.mark.parametrize("shape", [(6, 4), (3, 4, 7), (2, 4, 5, 6), (2, 4, 3, 2, 5)])
@pytest.mark.parametrize("weight", [None, [1.0, 2.0, 0.5, 3.0]])
def test_cross_entropy_matches_functional_in_value_and_gradient_for_every_layout(shape, weight, path,
                                                                                 monkeypatch):
    """N x C, N x C x L, N x C x H x W and N x C x D x H x W logits, some targets ignored; by the
    CPU's mean (torch's, read back) and by the GPU's (the sum over the clamped weight)."""
    if path == "gpu":
        take_the_gpu_path(monkeypatch)
    generator = torch.Generator().manual_seed(3)
    logits = torch.randn(shape, generator=generator, dtype=torch.float64)
    target = torch.randint(0, 4, (shape[0], *shape[2:]), generator=generator)
    target.view(-1)[::3] = IGNORE
    weights = torch.tensor(weight, dtype=torch.float64) if weight else None
    ours, theirs = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    loss = CrossEntropyLoss(weight=weight).to(torch.float64)(ours, target)  # float64 weights with float64 logits
    expected = F.cross_entropy(theirs, target, weight=weights, ignore_index=IGNORE)
    loss.backward(), expected.backward()
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(ours.grad, theirs.grad)


@pytest.mark.parametrize("path", ["cpu", "gpu"])
def test_cross_entropy_of_an_unbatched_sample_matches_functional(path, monkeypatch):
    if path == "gpu":
        take_the_gpu_path(monkeypatch)
    logits, target = torch.tensor([0.5, -1.0, 2.0]), torch.tensor(2)
    torch.testing.assert_close(CrossEntropyLoss()(logits, target), F.cross_entropy(logits, target))


def test_cross_entropy_under_bfloat16_autocast_is_computed_in_float32():
    logits, target = multiclass_batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        bf16_logits = logits.bfloat16()
        loss = CrossEntropyLoss(weight=[1.0, 2.0, 0.5, 3.0])(bf16_logits, target)
        expected = F.cross_entropy(bf16_logits, target, weight=torch.tensor([1.0, 2.0, 0.5, 3.0]), ignore_index=IGNORE)
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, expected)


def test_cross_entropy_of_a_bfloat16_model_is_computed_in_float32():
    """A task cast to bfloat16 whole (weights, buffers and logits): the class weights follow."""
    logits, target = multiclass_batch()
    weight = [1.0, 2.0, 0.5, 3.0]
    loss = CrossEntropyLoss(weight=weight).bfloat16()(logits.bfloat16(), target)
    expected = F.cross_entropy(logits.bfloat16().float(), target, weight=torch.tensor(weight), ignore_index=IGNORE)
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, expected)


@pytest.mark.parametrize("path", ["cpu", "gpu"])
def test_cross_entropy_of_non_finite_logits_is_not_finite(path, monkeypatch):
    """The non-finite guard stops a diverged run by its loss: the mean must not hide a NaN."""
    if path == "gpu":
        take_the_gpu_path(monkeypatch)
    logits, target = multiclass_batch()
    logits = logits.detach().clone()
    logits[1, 0, 4, 4] = float("nan")
    assert not torch.isfinite(CrossEntropyLoss()(logits, target))


@pytest.mark.parametrize("path", ["cpu", "gpu"])
def test_pixels_whose_class_weight_is_zero_count_nowhere(path, monkeypatch):
    """Every class present weighted 0: torch's mean is 0/0 there; the loss is 0, its gradients 0."""
    if path == "gpu":
        take_the_gpu_path(monkeypatch)
    logits, target = multiclass_batch()
    target = torch.where(target == IGNORE, IGNORE, target % 2)  # classes 0 and 1 only
    value = CrossEntropyLoss(weight=[0.0, 0.0, 1.0, 1.0])(logits, target)
    value.backward()
    assert value.item() == 0.0 and torch.equal(logits.grad, torch.zeros_like(logits))


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_integer_class_weights_from_a_config_work_as_floats(label_smoothing):
    """`weight: [1, 2, 1, 3]` in YAML is a list of ints."""
    logits, target = multiclass_batch()
    expected = F.cross_entropy(logits, target, weight=torch.tensor([1.0, 2.0, 1.0, 3.0]), ignore_index=IGNORE,
                               label_smoothing=label_smoothing)
    loss = CrossEntropyLoss(weight=[1, 2, 1, 3], label_smoothing=label_smoothing)
    torch.testing.assert_close(loss(logits, target), expected)


def test_cross_entropy_names_a_class_weight_count_that_does_not_match_the_logits():
    with pytest.raises(ValueError, match="ce: 3 class weights for 4 classes"):
        CrossEntropyLoss(weight=[1.0, 2.0, 3.0])(*multiclass_batch())


@pytest.mark.parametrize("smoothing, accepted", [(0.0, True), (1.0, True), (math.nextafter(1.0, 2.0), False),
                                                 (math.nextafter(0.0, -1.0), False)])
def test_label_smoothing_is_checked_at_its_bounds(smoothing, accepted):
    if accepted:
        CrossEntropyLoss(label_smoothing=smoothing)
    else:
        with pytest.raises(ValueError, match=r"label_smoothing must be in \[0, 1\], got"):
            CrossEntropyLoss(label_smoothing=smoothing)


def test_a_class_weight_that_is_neither_numbers_nor_auto_is_refused():
    with pytest.raises(ValueError, match="a class weight must be numbers or 'auto', got 'balanced'"):
        CrossEntropyLoss(weight="balanced")


# Losses are built inside the tests, not in the parameter lists: mutation testing (tests/MUTATION.md)
# changes the code after collection, and a loss built then would not see a changed __init__.
@pytest.mark.parametrize("loss_type, settings, channels", [
    (CrossEntropyLoss, {"weight": "auto"}, 4),
    (BCEWithLogitsLoss, {"pos_weight": "auto"}, 1),
    (DiceLoss, {"class_weight": "auto"}, 4),
], ids=["ce", "bce", "dice"])
def test_weights_auto_not_yet_computed_stop_the_loss_with_its_name(loss_type, settings, channels):
    message = (rf"^{loss_type.__name__}: weight 'auto' has not been computed from the training data "
               r"\(tools/train.py does it when it builds the run\)$")
    with pytest.raises(RuntimeError, match=message):
        loss_type(**settings)(torch.randn(2, channels, 8, 8), torch.zeros(2, 8, 8, dtype=torch.int64))


@pytest.mark.parametrize("weights", [[0.0, 2.0], [-1.0, 2.0], [1.0, 2.0, 3.0]])
def test_bce_pos_weight_auto_needs_two_classes_with_background(weights):
    with pytest.raises(ValueError, match="pos_weight: auto needs a 2-class dataset with background pixels, got weights"):
        BCEWithLogitsLoss(pos_weight="auto").set_class_weights(torch.tensor(weights))


@pytest.mark.parametrize("loss_type, settings, buffer", [(BCEWithLogitsLoss, {"pos_weight": 2.0}, "pos_weight"),
                                                     (DiceLoss, {"class_weight": [1.0, 2.0]}, "class_weight")],
                         ids=["bce", "dice"])
def test_binary_and_dice_weights_are_buffers_outside_the_state_dict(loss_type, settings, buffer):
    """Settings of the config, not weights: a checkpoint neither holds nor requires them."""
    loss = loss_type(**settings).to(torch.float64)
    assert getattr(loss, buffer).dtype == torch.float64 and buffer in dict(loss.named_buffers())
    assert buffer not in loss.state_dict()


def test_cross_entropy_weight_is_a_buffer_outside_the_state_dict():
    loss = CrossEntropyLoss(weight=[1.0, 2.0]).to(torch.float64)
    assert loss.weight.dtype == torch.float64 and "weight" in dict(loss.named_buffers())
    assert "weight" not in loss.state_dict()


@pytest.mark.parametrize("path", ["cpu", "gpu"])
def test_all_ignored_batch_gives_zero_loss_and_finite_gradients(path, monkeypatch):
    if path == "gpu":
        take_the_gpu_path(monkeypatch)
    logits, target = multiclass_batch()
    target.fill_(IGNORE)
    for loss in (CrossEntropyLoss(weight=[1.0, 2.0, 0.5, 3.0]), DiceLoss()):
        value = loss(logits, target)
        value.backward()
        assert torch.isfinite(value) and torch.isfinite(logits.grad).all()
    for loss in (CrossEntropyLoss(), CrossEntropyLoss(weight=[1.0, 2.0, 0.5, 3.0]), CrossEntropyLoss(label_smoothing=0.1)):
        logits.grad = None
        value = loss(logits, target)
        value.backward()
        assert value.item() == 0.0 and torch.equal(logits.grad, torch.zeros_like(logits))
    binary_logits, binary_target = binary_batch()
    binary_target.fill_(IGNORE)
    value = BCEWithLogitsLoss()(binary_logits, binary_target)
    value.backward()
    assert value.item() == 0.0 and torch.isfinite(binary_logits.grad).all()


@pytest.mark.parametrize("pos_weight", [None, 3.0])
@pytest.mark.parametrize("squeeze_channel", [False, True])
def test_bce_matches_functional_on_valid_pixels(pos_weight, squeeze_channel):
    logits, target = binary_batch()
    valid = target != IGNORE
    expected = F.binary_cross_entropy_with_logits(
        logits[:, 0][valid],
        target[valid].float(),
        pos_weight=None if pos_weight is None else torch.tensor(pos_weight),
    )
    loss = BCEWithLogitsLoss(pos_weight=pos_weight)
    assert loss.name == "bce"
    torch.testing.assert_close(loss(logits[:, 0] if squeeze_channel else logits, target), expected)


@pytest.mark.parametrize("loss_type, settings", [(BCEWithLogitsLoss, {}), (DiceLoss, {"mode": "binary"})],
                         ids=["bce", "dice"])
def test_binary_losses_reject_several_channels(loss_type, settings):
    message = rf"^{loss_type.__name__} expects one logit channel.*\(2, 3, 4, 4\); use a multiclass loss for several classes$"
    with pytest.raises(ValueError, match=message):
        loss_type(**settings)(torch.randn(2, 3, 4, 4), torch.zeros(2, 4, 4, dtype=torch.int64))


def dice_per_class(logits, target, smooth=1.0):
    """Multiclass Dice of each of the logits' classes, by hand (ignored pixels count nowhere)."""
    valid = (target != IGNORE).unsqueeze(1)
    probs = logits.softmax(1) * valid
    one_hot = F.one_hot(torch.where(target == IGNORE, 0, target), logits.shape[1]).permute(0, 3, 1, 2).float() * valid
    intersection = (probs * one_hot).sum((0, 2, 3))
    return (2 * intersection + smooth) / (probs.sum((0, 2, 3)) + one_hot.sum((0, 2, 3)) + smooth)


def test_multiclass_dice_matches_direct_computation():
    logits, target = multiclass_batch()
    loss = DiceLoss(mode="multiclass", smooth=1.0)
    assert loss.name == "dice"
    torch.testing.assert_close(loss(logits, target), 1 - dice_per_class(logits, target).mean())


def test_multiclass_dice_counts_a_class_absent_from_the_target():
    """The logits' classes, not the target's: class 3 appears nowhere, and still has its Dice."""
    logits, target = multiclass_batch()
    target = torch.where(target == 3, 0, target)
    torch.testing.assert_close(DiceLoss()(logits, target), 1 - dice_per_class(logits, target).mean())


def test_multiclass_dice_class_weight_is_a_weighted_mean_over_classes():
    logits, target = multiclass_batch()
    weights = torch.tensor([0.5, 2.0, 1.0, 3.0])
    expected = 1 - (dice_per_class(logits, target) * weights).sum() / weights.sum()
    torch.testing.assert_close(DiceLoss(class_weight=weights.tolist())(logits, target), expected)


def test_binary_dice_refuses_class_weights():
    with pytest.raises(ValueError, match="^class_weight: binary Dice has one class; weigh classes in multiclass mode$"):
        DiceLoss(mode="binary", class_weight=[1.0, 2.0])


def test_binary_dice_matches_direct_computation():
    logits, target = binary_batch()
    valid = target != IGNORE
    probs = torch.sigmoid(logits[:, 0])[valid]
    truth = target[valid].float()
    expected = 1 - (2 * (probs * truth).sum() + 0.5) / (probs.sum() + truth.sum() + 0.5)
    torch.testing.assert_close(DiceLoss(mode="binary", smooth=0.5)(logits, target), expected)


def test_perfect_prediction_has_near_zero_dice_loss():
    target = torch.randint(0, 3, (2, 8, 8))
    logits = 50.0 * F.one_hot(target, 3).permute(0, 3, 1, 2).float()
    assert DiceLoss()(logits, target).item() < 1e-6


def test_dice_rejects_unknown_mode():
    with pytest.raises(ValueError, match=r"'softmax'.*'multiclass', 'binary'"):
        DiceLoss(mode="softmax")


def test_combined_loss_built_from_nested_nodes():
    loss = LOSSES.build(
        {"type": "CombinedLoss", "losses": [{"type": "CrossEntropyLoss"}, {"type": "DiceLoss"}], "weights": [1.0, 0.5]}
    )
    logits, target = multiclass_batch()
    ce = F.cross_entropy(logits, target, ignore_index=IGNORE)
    dice = DiceLoss()(logits, target)
    terms = loss.terms(logits, target)
    assert list(terms) == ["loss_ce", "loss_dice"]
    torch.testing.assert_close(terms["loss_ce"], ce)
    torch.testing.assert_close(terms["loss_dice"], 0.5 * dice)
    torch.testing.assert_close(loss(logits, target), ce + 0.5 * dice)


def test_combined_loss_gives_repeated_names_distinct_keys():
    loss = CombinedLoss([CrossEntropyLoss(), CrossEntropyLoss(label_smoothing=0.1), DiceLoss(), CrossEntropyLoss()])
    logits, target = multiclass_batch()
    assert list(loss.terms(logits, target)) == ["loss_ce", "loss_ce_1", "loss_dice", "loss_ce_2"]


class SquaredLogits(torch.nn.Module):
    """A user's loss without a `name`."""

    def forward(self, logits, target):
        return (logits ** 2).mean()


def test_combined_loss_weighs_each_term_1_by_default_and_names_an_unnamed_loss_by_its_class():
    logits, target = multiclass_batch()
    terms = CombinedLoss([CrossEntropyLoss(), SquaredLogits()]).terms(logits, target)
    assert list(terms) == ["loss_ce", "loss_squaredlogits"]
    torch.testing.assert_close(terms["loss_ce"], F.cross_entropy(logits, target, ignore_index=IGNORE))
    torch.testing.assert_close(terms["loss_squaredlogits"], (logits ** 2).mean())


@pytest.mark.parametrize("losses", [[], [CrossEntropyLoss(), "dice"]], ids=["empty", "not a module"])
def test_combined_loss_refuses_what_is_not_a_list_of_losses(losses):
    with pytest.raises(ValueError, match="losses must be a non-empty list of loss nodes, got"):
        CombinedLoss(losses)


def test_combined_loss_length_mismatch_names_both_lengths():
    with pytest.raises(ValueError, match=r"2 losses but 3 weights"):
        CombinedLoss([CrossEntropyLoss(), DiceLoss()], weights=[1.0, 1.0, 1.0])
    with pytest.raises(ConfigError, match=r"loss \(CombinedLoss\): 1 losses but 2 weights"):
        LOSSES.build({"type": "CombinedLoss", "losses": [{"type": "DiceLoss"}], "weights": [1, 2]}, path="loss")
