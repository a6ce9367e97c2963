"""Focal, Tversky and Lovasz losses against references written here from the published formulas
(element by element, in float64 python), and OHEM's choice of pixels on a hand-made batch."""

import math
import re

import pytest
import torch

from framework.losses import OHEM, CrossEntropyLoss, FocalLoss, LovaszLoss, TverskyLoss
from framework.registry import LOSSES

IGNORE = 255


def batch(mode, seed=0, classes=3):
    """Small logits and targets with some ignored pixels, for every mode."""
    g = torch.Generator().manual_seed(seed)
    if mode == "multiclass":
        logits, target = torch.randn(2, classes, 4, 5, generator=g), torch.randint(0, classes, (2, 4, 5), generator=g)
        target[0, 0, :3] = IGNORE
    elif mode == "binary":
        logits, target = torch.randn(2, 1, 4, 5, generator=g), torch.randint(0, 2, (2, 4, 5), generator=g)
        target[1, :, 0] = IGNORE
    else:
        logits, target = torch.randn(2, classes, 4, 5, generator=g), torch.randint(0, 2, (2, classes, 4, 5), generator=g)
        target[0, 1, :2] = IGNORE
    return logits.requires_grad_(), target


def per_class_elements(logits, target, mode):
    """{class: [(logit or probability source, truth 0/1), ...] over valid elements} and, for
    multiclass, the softmax probabilities; plain python floats."""
    x, t = logits.detach().double(), target
    out = {}
    if mode == "multiclass":
        probs = x.softmax(1)
        for c in range(x.shape[1]):
            out[c] = [(x[n, c, i, j].item(), probs[n, c, i, j].item(), int(t[n, i, j] == c))
                      for n in range(x.shape[0]) for i in range(x.shape[2]) for j in range(x.shape[3])
                      if t[n, i, j] != IGNORE]
    else:
        x = x if mode == "multilabel" else x
        t = t if mode == "multilabel" else t.unsqueeze(1)
        for c in range(x.shape[1]):
            out[c] = [(x[n, c, i, j].item(), 1 / (1 + math.exp(-x[n, c, i, j].item())), int(t[n, c, i, j]))
                      for n in range(x.shape[0]) for i in range(x.shape[2]) for j in range(x.shape[3])
                      if t[n, c, i, j] != IGNORE]
    return out


def focal_reference(logits, target, mode, alpha, gamma):
    """-alpha_t (1 - p_t)^gamma log(p_t), p = sigmoid(logit); multiclass: each class against the
    rest, its mean over the valid pixels, summed over classes; else the mean over all valid elements."""
    def term(logit, y):
        p = 1 / (1 + math.exp(-logit))
        p_t = p if y else 1 - p
        a_t = 1.0 if alpha is None else (alpha if y else 1 - alpha)
        return -a_t * (1 - p_t) ** gamma * math.log(p_t)

    elements = per_class_elements(logits, target, mode)
    if mode == "multiclass":
        return sum(sum(term(x, y) for x, _, y in e) / len(e) for e in elements.values())
    flat = [term(x, y) for e in elements.values() for x, _, y in e]
    return sum(flat) / len(flat)


def tversky_reference(logits, target, mode, alpha, beta, gamma, smooth=0.0, eps=1e-7, log_loss=False):
    losses = []
    for elements in per_class_elements(logits, target, mode).values():
        tp = sum(p * y for _, p, y in elements)
        fp = sum(p * (1 - y) for _, p, y in elements)
        fn = sum((1 - p) * y for _, p, y in elements)
        score = (tp + smooth) / max(tp + alpha * fp + beta * fn + smooth, eps)
        class_loss = -math.log(max(score, eps)) if log_loss else 1 - score
        losses.append(class_loss if any(y for _, _, y in elements) else 0.0)
    return (sum(losses) / len(losses)) ** gamma


def lovasz_extension(errors, truth):
    """The Lovasz extension of the Jaccard loss at `errors`, straight from its definition:
    sorted decreasingly, error i is weighted by Delta(first i) - Delta(first i - 1), where
    Delta(S) = |S| / |G u S| is the Jaccard loss when the pixels S are wrong (G: the truth)."""
    order = sorted(range(len(errors)), key=lambda i: -errors[i])
    ground = {i for i, y in enumerate(truth) if y}

    def jaccard_loss(wrong):
        return len(wrong) / len(ground | wrong) if wrong else 0.0

    total, wrong = 0.0, set()
    for i in order:
        before = jaccard_loss(wrong)
        wrong.add(i)
        total += errors[i] * (jaccard_loss(wrong) - before)
    return total


def lovasz_reference(logits, target, mode):
    elements = per_class_elements(logits, target, mode)
    if mode == "multiclass":  # Lovasz softmax: errors |[y = c] - p_c|, mean over present classes
        present = [e for e in elements.values() if any(y for _, _, y in e)]
        return sum(lovasz_extension([abs(y - p) for _, p, y in e], [y for _, _, y in e]) for e in present) / len(present)
    flat = [(x, y) for e in elements.values() for x, _, y in e]  # Lovasz hinge over every element
    return lovasz_extension([max(0.0, 1 - x * (2 * y - 1)) for x, y in flat], [y for _, y in flat])


def close(value, reference):
    torch.testing.assert_close(value.double(), torch.tensor(reference, dtype=torch.float64), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("mode", ["binary", "multiclass", "multilabel"])
@pytest.mark.parametrize("alpha, gamma", [(None, 2.0), (0.25, 2.0), (0.6, 0.0), (None, 1.5)])
def test_focal_equals_the_formula(mode, alpha, gamma):
    logits, target = batch(mode)
    close(FocalLoss(mode, alpha=alpha, gamma=gamma)(logits, target), focal_reference(logits, target, mode, alpha, gamma))


@pytest.mark.parametrize("mode", ["binary", "multiclass", "multilabel"])
@pytest.mark.parametrize("alpha, beta, gamma", [(0.5, 0.5, 1.0), (0.3, 0.7, 1.0), (0.7, 0.3, 4 / 3)])
def test_tversky_equals_the_formula(mode, alpha, beta, gamma):
    logits, target = batch(mode, classes=4)
    if mode == "multiclass":
        target[target == 3] = 0  # class 3 absent: its loss is 0 and still counts in the mean
    close(TverskyLoss(mode, alpha=alpha, beta=beta, gamma=gamma)(logits, target),
          tversky_reference(logits, target, mode, alpha, beta, gamma))


@pytest.mark.parametrize("mode", ["binary", "multiclass", "multilabel"])
@pytest.mark.parametrize("smooth, log_loss", [(1.0, False), (0.0, True), (0.5, True)])
def test_tversky_smooth_and_log_loss_equal_the_formula(mode, smooth, log_loss):
    logits, target = batch(mode, classes=4)
    if mode == "multiclass":
        target[target == 3] = 0  # an absent class adds 0 whatever the smoothing or log
    close(TverskyLoss(mode, alpha=0.3, beta=0.7, smooth=smooth, log_loss=log_loss)(logits, target),
          tversky_reference(logits, target, mode, 0.3, 0.7, 1.0, smooth=smooth, log_loss=log_loss))


@pytest.mark.parametrize("make, message", [
    (lambda: FocalLoss(alpha=1.5), "alpha must be in [0, 1] or null, got 1.5"),
    (lambda: FocalLoss(alpha=-0.1), "alpha must be in [0, 1] or null, got -0.1"),
    (lambda: FocalLoss(gamma=-1), "gamma must be >= 0, got -1"),
    (lambda: TverskyLoss(alpha=-1), "alpha must be >= 0, got -1"),
    (lambda: TverskyLoss(beta=-0.5), "beta must be >= 0, got -0.5"),
    (lambda: TverskyLoss(smooth=-1), "smooth must be >= 0, got -1"),
    (lambda: TverskyLoss(eps=-1e-3), "eps must be >= 0, got -0.001"),
    (lambda: TverskyLoss(gamma=0), "gamma must be > 0, got 0"),
], ids=["focal_alpha_high", "focal_alpha_negative", "focal_gamma", "alpha", "beta", "smooth", "eps", "gamma"])
def test_hard_pixel_loss_settings_are_refused_naming_the_value(make, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        make()


def test_a_class_with_a_single_pixel_counts_in_tversky():
    logits, target = batch("multiclass", classes=4)
    target[target == 3] = 0
    target[0, 0, 0] = 3  # class 3 present in exactly one pixel: its loss counts
    close(TverskyLoss("multiclass")(logits, target), tversky_reference(logits, target, "multiclass", 0.5, 0.5, 1.0))


def test_a_focal_loss_shape_error_names_the_focal_loss():
    logits, target = batch("multiclass")
    with pytest.raises(ValueError, match=r"^FocalLoss mode: multilabel takes a 0/1 target per class \(N x C x H x W\), "
                                         r"but the target is class ids \(2, 4, 5\) for logits \(2, 3, 4, 5\); use "
                                         r"mode: multiclass$"):
        FocalLoss("multilabel")(logits, target)
    with pytest.raises(ValueError, match=r"^FocalLoss \(multilabel\): target \(2, 3, 4, 6\) does not match logits"):
        FocalLoss("multilabel")(logits, torch.zeros(2, 3, 4, 6))


def test_the_boundaries_are_allowed_and_the_defaults_are_smps():
    FocalLoss(alpha=0.0), FocalLoss(alpha=1.0), FocalLoss(gamma=0.0)
    TverskyLoss(alpha=0.0, beta=0.0, smooth=0.0, eps=0.0, gamma=0.5)
    focal, tversky, lovasz = FocalLoss(), TverskyLoss(), LovaszLoss()
    assert (focal.mode, focal.alpha, focal.gamma, focal.ignore_index) == ("multiclass", None, 2.0, 255)
    assert (tversky.mode, tversky.alpha, tversky.beta, tversky.gamma, tversky.smooth, tversky.eps, tversky.log_loss,
            tversky.ignore_index) == ("multiclass", 0.5, 0.5, 1.0, 0.0, 1e-7, False, 255)
    assert (lovasz.mode, lovasz.per_image, lovasz.ignore_index) == ("multiclass", False, 255)


@pytest.mark.parametrize("mode", ["binary", "multiclass", "multilabel"])
def test_lovasz_equals_the_extension_of_the_jaccard_loss(mode):
    logits, target = batch(mode, classes=4)
    if mode == "multiclass":
        target[target == 2] = 0  # an absent class is left out of the mean
    close(LovaszLoss(mode)(logits, target), lovasz_reference(logits, target, mode))
    per_image = LovaszLoss(mode, per_image=True)(logits, target)
    close(per_image, sum(lovasz_reference(logits[n:n + 1], target[n:n + 1], mode) for n in range(2)) / 2)


@pytest.mark.parametrize("loss", [FocalLoss("multiclass"), TverskyLoss("multiclass"), LovaszLoss("multiclass"),
                                  FocalLoss("binary"), TverskyLoss("binary"), LovaszLoss("binary"),
                                  CrossEntropyLoss(ohem={"min_kept": 3, "thresh": 0.7})])
def test_ignored_pixels_change_nothing_and_an_ignored_batch_gives_zero(loss):
    mode = getattr(loss, "mode", "multiclass")
    logits, target = batch(mode, classes=3)
    ignored = target == IGNORE
    value = loss(logits, target)
    changed = logits.detach().clone()
    changed[(ignored.unsqueeze(1) if mode == "multiclass" else ignored.unsqueeze(1)).expand_as(changed)] = 50.0
    torch.testing.assert_close(loss(changed, target), value.detach())
    empty = loss(logits, torch.full_like(target, IGNORE))
    empty.backward()
    assert empty.item() == 0.0 and logits.grad is not None and not logits.grad.any()


def test_modes_and_shapes_are_checked():
    with pytest.raises(ValueError, match="unknown mode 'multi'; choose one of 'binary', 'multiclass', 'multilabel'"):
        FocalLoss("multi")
    logits, target = batch("multiclass")
    with pytest.raises(ValueError, match=r"TverskyLoss mode: multilabel takes a 0/1 target per class"):
        TverskyLoss("multilabel")(logits, target)
    with pytest.raises(ValueError, match=r"^LovaszLoss mode: binary takes one logit channel \(N x 1 x H x W\), but the "
                                         r"model gives 3; use mode: multiclass for class ids, multilabel for 0/1 maps"):
        LovaszLoss("binary")(logits, target)
    LovaszLoss("binary")(logits[:, :1], (target > 0).long())  # one channel: the boundary that passes


# ------------------------------------------------------------------------------------ OHEM

# One image of 2 x 3 pixels, all of class 1, the last one ignored; the probability the
# network gives class 1 at each pixel (2 classes: logits 0 and log(p / (1 - p))).
PROBS = [0.9, 0.2, 0.6, 0.75, 0.5, 0.3]


def ohem_batch():
    p = torch.tensor(PROBS, dtype=torch.float64).view(1, 2, 3)
    logits = torch.stack([torch.zeros_like(p), torch.log(p / (1 - p))], dim=1).float()
    target = torch.ones(1, 2, 3, dtype=torch.long)
    target[0, 1, 2] = IGNORE
    return logits, target


def kept_pixels(ohem: OHEM, logits, target) -> list[int]:
    return ohem.keep(logits, target, target != IGNORE).view(-1).nonzero().view(-1).tolist()


@pytest.mark.parametrize("settings, expected", [
    (dict(thresh=0.7, min_kept=2), [1, 2, 4]),   # below 0.7: 0.2, 0.6, 0.5; the 2 hardest among them
    (dict(thresh=0.7, min_kept=4), [1, 2, 3, 4]),  # the 4 hardest add 0.75
    (dict(thresh=0.55, min_kept=1), [1, 4]),      # below 0.55: 0.2, 0.5
    (dict(min_kept=2), [1, 4]),                   # top-k: the 2 hardest, 0.2 and 0.5
    (dict(min_kept=3), [1, 2, 4]),
    (dict(min_kept=10), [0, 1, 2, 3, 4]),         # more than there are: every valid pixel, never the ignored
    (dict(thresh=1.0, min_kept=1), [0, 1, 2, 3, 4]),
])
def test_ohem_keeps_exactly_the_hard_pixels(settings, expected):
    logits, target = ohem_batch()
    assert kept_pixels(OHEM(**settings), logits, target) == expected
    loss = CrossEntropyLoss(ohem=settings)(logits, target)
    close(loss, sum(-math.log(PROBS[i]) for i in expected) / len(expected))  # mean over the kept pixels


def test_ohem_min_kept_counts_per_image():
    logits, target = ohem_batch()
    logits, target = torch.cat([logits, logits.flip(-1)]), torch.cat([target, target.flip(-1)])
    probs = torch.tensor(PROBS, dtype=torch.float64).view(1, 2, 3)
    probs = torch.cat([probs, probs.flip(-1)])
    kept = OHEM(min_kept=2).keep(logits, target, target != IGNORE)
    # 2 per image x 2 images: the 4 hardest of the batch, 0.2 and 0.5 of each image
    assert sorted(probs[kept].tolist()) == [0.2, 0.2, 0.5, 0.5]


def test_ohem_with_class_weights_is_the_weighted_mean_over_kept_pixels():
    logits, target = ohem_batch()
    target[0, 0, 1] = 0  # pixel 1 now of class 0 (p = 0.8 for class 0: easy, never kept below 0.7)
    loss = CrossEntropyLoss(weight=[2.0, 3.0], ohem=dict(thresh=0.7, min_kept=1))(logits, target)
    kept = [2, 4]  # class 1 pixels below 0.7: 0.6 and 0.5
    close(loss, sum(3.0 * -math.log(PROBS[i]) for i in kept) / (3.0 * len(kept)))


@pytest.mark.parametrize("settings, message", [
    (dict(min_kept=0), "ohem.min_kept must be an integer >= 1"),
    (dict(min_kept=True), "ohem.min_kept must be an integer >= 1"),
    (dict(min_kept=2.5), "ohem.min_kept must be an integer >= 1"),
    (dict(min_kept=5, thresh=0.0), r"ohem.thresh must be in \(0, 1\]"),
    (dict(min_kept=5, thresh=1.5), r"ohem.thresh must be in \(0, 1\]"),
    (dict(min_kept=5, top=3), "unexpected keyword argument 'top'"),
])
def test_ohem_settings_are_checked(settings, message):
    with pytest.raises((ValueError, TypeError), match=message):
        CrossEntropyLoss(ohem=settings)


def test_losses_combine_from_a_config_node():
    combined = LOSSES.build({"type": "CombinedLoss", "weights": [1.0, 0.5, 0.25], "losses": [
        {"type": "CrossEntropyLoss", "ohem": {"thresh": 0.7, "min_kept": 4}},
        {"type": "LovaszLoss", "mode": "multiclass"},
        {"type": "TverskyLoss", "alpha": 0.3, "beta": 0.7}]}, path="task.loss")
    logits, target = batch("multiclass")
    terms = combined.terms(logits, target)
    assert list(terms) == ["loss_ce", "loss_lovasz", "loss_tversky"]
    close(terms["loss_lovasz"], 0.5 * lovasz_reference(logits, target, "multiclass"))
    close(combined(logits, target), sum(t.item() for t in terms.values()))
