"""OASIS's losses (framework/losses/oasis.py) against the formulas written out pixel by pixel."""

from __future__ import annotations

import math

import pytest
import torch

from framework.losses.oasis import (
    class_balanced_ce,
    class_balancing_weights,
    fake_class_ce,
    labelmix_consistency,
    labelmix_images,
    labelmix_mask,
)
from framework.models.spade import one_hot_labels

IGNORE = 255
# One image of 2x3 and one of 2x3: class 0 x 5, class 1 x 4, class 2 x 0, ignored x 3.
LABELS = torch.tensor([[[0, 0, 1], [IGNORE, 0, 1]],
                       [[0, 1, 1], [0, IGNORE, IGNORE]]])


def _ce(logits_pixel: list[float], target: int) -> float:
    return -logits_pixel[target] + math.log(sum(math.exp(v) for v in logits_pixel))


def _pixels(labels):
    n, h, w = labels.shape
    return [(i, y, x) for i in range(n) for y in range(h) for x in range(w)]


def test_class_balancing_weights_are_oasis_formula():
    weights = class_balancing_weights(LABELS, num_classes=3, ignore_index=IGNORE)
    # 12 pixels (ignored included), 2 present classes: class 0 -> 12 / (2 * 5), class 1 -> 12 / (2 * 4).
    expected = {0: 12 / 10, 1: 12 / 8, IGNORE: 0.0}
    for i, y, x in _pixels(LABELS):
        assert math.isclose(weights[i, y, x].item(), expected[LABELS[i, y, x].item()], rel_tol=1e-6)
    # Each present class weighs the same in total: pixels / present classes.
    assert math.isclose(weights[LABELS == 0].sum().item(), weights[LABELS == 1].sum().item(), rel_tol=1e-6)


def test_one_class_more_present_changes_every_weight():
    labels = LABELS.clone()
    labels[1, 1, 1] = 2  # an ignored pixel becomes class 2: three present classes
    weights = class_balancing_weights(labels, num_classes=3, ignore_index=IGNORE)
    assert math.isclose(weights[0, 0, 0].item(), 12 / (3 * 5), rel_tol=1e-6)
    assert math.isclose(weights[1, 1, 1].item(), 12 / (3 * 1), rel_tol=1e-6)


def test_class_balanced_ce_by_hand():
    torch.manual_seed(0)
    logits = torch.randn(2, 4, 2, 3)  # 3 classes + fake
    expected_weight = {0: 12 / 10, 1: 12 / 8, IGNORE: 0.0}
    total = 0.0
    for i, y, x in _pixels(LABELS):
        label = LABELS[i, y, x].item()
        if label != IGNORE:
            total += expected_weight[label] * _ce(logits[i, :, y, x].tolist(), label)
    expected = total / 12  # the mean over every pixel, as OASIS
    assert math.isclose(class_balanced_ce(logits, LABELS, IGNORE).item(), expected, rel_tol=1e-5)


def test_fake_class_ce_by_hand_ignores_the_dontcare_pixels():
    torch.manual_seed(1)
    logits = torch.randn(2, 4, 2, 3)
    terms = [_ce(logits[i, :, y, x].tolist(), 3) for i, y, x in _pixels(LABELS) if LABELS[i, y, x] != IGNORE]
    assert len(terms) == 9
    assert math.isclose(fake_class_ce(logits, LABELS, IGNORE).item(), sum(terms) / 9, rel_tol=1e-5)
    # With nothing ignored, every pixel counts (ignore_index set to a value no pixel has).
    every = [_ce(logits[i, :, y, x].tolist(), 3) for i, y, x in _pixels(LABELS)]
    assert math.isclose(fake_class_ce(logits, LABELS, ignore_index=99).item(), sum(every) / 12, rel_tol=1e-5)


def test_losses_resize_labels_to_smaller_logits_nearest():
    labels = torch.tensor([[[0, 0, 1, 1], [0, 0, 1, 1], [2, 2, 1, 1], [2, 2, 1, 1]]])
    small = torch.tensor([[[0, 1], [2, 1]]])
    logits = torch.randn(1, 4, 2, 2)
    assert math.isclose(class_balanced_ce(logits, labels).item(), class_balanced_ce(logits, small).item(), rel_tol=1e-6)
    assert math.isclose(fake_class_ce(logits, labels).item(), fake_class_ce(logits, small).item(), rel_tol=1e-6)


def test_labelmix_mask_is_constant_on_each_class_region_of_each_image():
    torch.manual_seed(0)
    labels = torch.randint(0, 5, (6, 8, 8))
    labels[:, 0, 0] = IGNORE
    mask = labelmix_mask(labels, num_classes=5, ignore_index=IGNORE, generator=torch.Generator().manual_seed(3))
    assert mask.shape == (6, 1, 8, 8)
    assert set(mask.unique().tolist()) <= {0.0, 1.0}
    for i in range(6):
        for value in labels[i].unique():
            assert mask[i, 0][labels[i] == value].unique().numel() == 1  # one choice per region
    # Over 6 images x 6 regions both choices occur, and images do not all choose alike.
    assert 0 < mask.mean() < 1
    assert any(not torch.equal(mask[0], mask[i]) for i in range(1, 6))
    again = labelmix_mask(labels, 5, IGNORE, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(mask, again)


def test_labelmix_images_and_consistency_by_hand():
    torch.manual_seed(2)
    mask = torch.tensor([[[[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]]]]).expand(2, 1, 2, 3).clone()
    real, fake = torch.rand(2, 3, 2, 3), torch.rand(2, 3, 2, 3)
    mixed = labelmix_images(mask, real, fake)
    for i, y, x in _pixels(LABELS):
        source = real if mask[i, 0, y, x] == 1 else fake
        torch.testing.assert_close(mixed[i, :, y, x], source[i, :, y, x])

    d_mixed, d_real, d_fake = torch.randn(2, 4, 2, 3), torch.randn(2, 4, 2, 3), torch.randn(2, 4, 2, 3)
    squares = []
    for i, y, x in _pixels(LABELS):
        if LABELS[i, y, x] == IGNORE:
            continue
        m = mask[i, 0, y, x].item()
        for c in range(4):
            target = m * d_real[i, c, y, x].item() + (1 - m) * d_fake[i, c, y, x].item()
            squares.append((d_mixed[i, c, y, x].item() - target) ** 2)
    expected = 10.0 * sum(squares) / len(squares)  # 9 valid pixels x 4 channels
    got = labelmix_consistency(d_mixed, d_real, d_fake, mask, LABELS, IGNORE)
    assert math.isclose(got.item(), expected, rel_tol=1e-5)
    half = labelmix_consistency(d_mixed, d_real, d_fake, mask, LABELS, IGNORE, weight=5.0)
    assert math.isclose(half.item(), expected / 2, rel_tol=1e-5)
    # D consistent with the mix: zero loss.
    consistent = mask * d_real + (1 - mask) * d_fake
    assert labelmix_consistency(consistent, d_real, d_fake, mask, LABELS, IGNORE).item() == 0.0


def test_generator_gradient_flows_through_the_balanced_term():
    logits = torch.randn(2, 4, 2, 3, requires_grad=True)
    class_balanced_ce(logits, LABELS, IGNORE).backward()
    ignored = (LABELS == IGNORE)
    # Ignored pixels get no gradient; the others do.
    per_pixel = logits.grad.abs().sum(dim=1)
    assert (per_pixel[ignored] == 0).all() and (per_pixel[~ignored] > 0).all()


@pytest.mark.cuda
def test_no_host_sync_on_cuda_in_the_losses_and_the_one_hot_labels():
    """What a training step calls every iteration must not wait for the GPU (no .item(), no
    bincount, no boolean indexing): torch raises on any synchronising call in this mode."""
    device = torch.device("cuda")
    labels = LABELS.to(device)
    logits = [torch.randn(2, 4, 2, 3, device=device, requires_grad=True) for _ in range(3)]
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        one_hot_labels(labels, 3, IGNORE, contain_dontcare_label=True)
        mask = labelmix_mask(labels, 3, IGNORE)
        loss = (class_balanced_ce(logits[0], labels, IGNORE) + fake_class_ce(logits[1], labels, IGNORE)
                + labelmix_consistency(logits[2], logits[0], logits[1], mask, labels, IGNORE))
        loss.backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.isfinite(loss).item()


def test_every_class_up_to_the_last_and_another_ignore_value():
    """The last true class (num_classes - 1) is weighted like the others and the fake class is
    not a true one; the ignore value is whatever the caller says (9 here, 255 a class-free id)."""
    labels = torch.tensor([[[0, 2, 2, 9], [1, 2, 9, 9]]])  # 3 classes: 0 x 1, 1 x 1, 2 x 3; 9 ignored x 3
    torch.manual_seed(3)
    logits = torch.randn(1, 4, 2, 4)
    weight = {0: 8 / 3, 1: 8 / 3, 2: 8 / 9}  # 8 pixels / (3 present classes x count)
    terms = [weight[labels[0, y, x].item()] * _ce(logits[0, :, y, x].tolist(), labels[0, y, x].item())
             for y in range(2) for x in range(4) if labels[0, y, x] != 9]
    assert math.isclose(class_balanced_ce(logits, labels, ignore_index=9).item(), sum(terms) / 8, rel_tol=1e-5)
    fakes = [_ce(logits[0, :, y, x].tolist(), 3) for y in range(2) for x in range(4) if labels[0, y, x] != 9]
    assert math.isclose(fake_class_ce(logits, labels, ignore_index=9).item(), sum(fakes) / 5, rel_tol=1e-5)


def test_a_single_valid_pixel_is_the_whole_loss():
    labels = torch.full((1, 2, 2), IGNORE)
    labels[0, 1, 0] = 1
    weights = class_balancing_weights(labels, 3, IGNORE)
    assert weights.tolist() == [[[0.0, 0.0], [4.0, 0.0]]]  # 4 pixels / (1 class x 1 pixel)
    logits = torch.randn(1, 4, 2, 2)
    assert math.isclose(fake_class_ce(logits, labels, IGNORE).item(), _ce(logits[0, :, 1, 0].tolist(), 3), rel_tol=1e-5)


def test_defaults_ignore_255_and_weigh_labelmix_by_ten():
    torch.manual_seed(4)
    d_mixed, d_real, d_fake = torch.randn(2, 4, 2, 3), torch.randn(2, 4, 2, 3), torch.randn(2, 4, 2, 3)
    mask = labelmix_mask(LABELS, 3)
    assert labelmix_consistency(d_mixed, d_real, d_fake, mask, LABELS).item() == pytest.approx(
        labelmix_consistency(d_mixed, d_real, d_fake, mask, LABELS, IGNORE, weight=10.0).item())
    assert class_balanced_ce(d_mixed, LABELS).item() == pytest.approx(class_balanced_ce(d_mixed, LABELS, IGNORE).item())
    assert fake_class_ce(d_mixed, LABELS).item() == pytest.approx(fake_class_ce(d_mixed, LABELS, IGNORE).item())


def test_labelmix_with_more_images_than_rows_and_logits_smaller_than_the_mask():
    torch.manual_seed(5)
    labels = torch.randint(0, 3, (5, 2, 8))  # 5 images of 2 rows: one coin row per image, not per image row
    mask = labelmix_mask(labels, 3, IGNORE)
    for i in range(5):
        for value in labels[i].unique():
            assert mask[i, 0][labels[i] == value].unique().numel() == 1
    # Logits at half the size: mask and labels taken at the logits' pixels (nearest).
    big_labels = torch.tensor([[[0, 0, 1, 1], [0, 0, 1, 1], [2, 2, IGNORE, IGNORE], [2, 2, IGNORE, IGNORE]]])
    big_mask = torch.tensor([[[[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0]]]])
    d_mixed, d_real, d_fake = torch.randn(1, 4, 2, 2), torch.randn(1, 4, 2, 2), torch.randn(1, 4, 2, 2)
    small_mask, small_labels = big_mask[:, :, ::2, ::2], big_labels[:, ::2, ::2]
    expected = labelmix_consistency(d_mixed, d_real, d_fake, small_mask, small_labels, IGNORE)
    got = labelmix_consistency(d_mixed, d_real, d_fake, big_mask, big_labels, IGNORE)
    assert got.item() == pytest.approx(expected.item())
    target = small_mask * d_real + (1 - small_mask) * d_fake
    squares = (d_mixed - target).pow(2)[0, :, :, :].reshape(4, 4)[:, :3]  # pixels 0, 1, 2 valid; 3 ignored
    assert got.item() == pytest.approx(10 * squares.mean().item())
