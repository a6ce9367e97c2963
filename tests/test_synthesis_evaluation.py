"""What SemanticSynthesisTask's evaluation returns: two draws per label map, each seeded by the
sample's dataset index (its own noise per map, the same in every evaluation and any batch), and
the rows of label map, both draws and the real image that the tools write."""

import pytest
import torch
from test_synthesis_task import CLASSES, NOISE, SIZE, batch, generator, patch_discriminator

from framework.tasks.synthesis import SemanticSynthesisTask


@pytest.mark.parametrize("noise_dim", [NOISE, 0])
def test_evaluation_draws_two_seeded_images_per_label_map_that_differ_only_with_noise(noise_dim):
    torch.manual_seed(0)
    task = SemanticSynthesisTask(generator(noise_dim), patch_discriminator(), CLASSES).eval()
    with torch.no_grad():
        first, again = task.val_step(batch()), task.val_step(batch())
    assert set(first) == {"fake", "fake_alt", "real", "labels"}
    assert torch.equal(first["fake"], again["fake"])  # seeded by the sample's index
    assert torch.equal(first["labels"], batch()["mask"].long())
    assert (first["fake"] - first["fake_alt"]).abs().mean() > 1e-3 if noise_dim else \
        torch.equal(first["fake"], first["fake_alt"])


def test_each_label_map_gets_the_noise_of_its_own_index_in_any_batch():
    """One label map at indices 3 and 8 gives two images (in both draws): evaluation noise is
    seeded by the index (+ the second draw's offset), so FID/KID see one draw per map, not one
    noise vector for every map; index 8 alone gives the image it gave beside index 3."""
    torch.manual_seed(0)
    task = SemanticSynthesisTask(generator(), patch_discriminator(), CLASSES).eval()  # instance norm
    data = batch()
    data["mask"][1], data["image"][1] = data["mask"][0], data["image"][0]
    with torch.no_grad():
        both = task.val_step(data)
        alone = task.val_step({key: value[1:] for key, value in data.items()})
    for key in ("fake", "fake_alt"):
        assert (both[key][0] - both[key][1]).abs().mean() > 1e-3, key
        torch.testing.assert_close(alone[key][0], both[key][1], msg=key)
    noise = task.evaluation_noise(torch.tensor([3, 8, 3]))
    assert noise.shape == (3, NOISE) and torch.equal(noise[0], noise[2]) and not torch.equal(noise[0], noise[1])


def test_rows_show_the_label_map_both_draws_and_the_real_image(tmp_path):
    import cv2

    torch.manual_seed(0)
    task = SemanticSynthesisTask(generator(), patch_discriminator(), CLASSES).eval()
    data = batch()
    with torch.no_grad():
        outputs = task.val_step(data)
    grid = task.visualize(data, outputs, max_images=1)["samples"]
    assert grid.shape == (3, SIZE, 4 * SIZE)
    mask = data["mask"][0].long()
    valid = mask != 255  # the label map in the palette's colours (class 0's is black: every class counts)
    torch.testing.assert_close(grid[:, :, :SIZE][:, valid], task.palette[mask[valid]].float().T / 255)
    assert torch.all(grid[:, :3, :3] == 1.0)  # don't-care pixels white
    torch.testing.assert_close(grid[:, :, SIZE:2 * SIZE], outputs["fake"][0])
    torch.testing.assert_close(grid[:, :, 2 * SIZE:3 * SIZE], outputs["fake_alt"][0])
    torch.testing.assert_close(grid[:, :, 3 * SIZE:], outputs["real"][0])
    task.save_visuals(data, outputs, tmp_path)
    assert cv2.imread(str(tmp_path / "b.png")).shape == (SIZE, 4 * SIZE, 3)
