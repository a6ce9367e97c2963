"""DCGAN: the default config trains and writes fixed-noise sample grids; networks and datasets."""

import cv2
import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torchvision.utils import make_grid

import framework  # noqa: F401
import projects.dcgan  # noqa: F401  (registers the networks and datasets)
from framework.checkpoint.files import load_checkpoint
from framework.errors import ConfigError, DataError
from framework.registry import DATASETS, MODELS
from support import REPO, call_tool, train_run

CONFIG = REPO / "projects/dcgan/configs/dcgan_shapes.yaml"
TINY = [
    "train.max_iters=4", "train.val_interval=2", "train.ckpt_interval=4", "train.log_interval=2",
    "data.train.dataset.num_samples=32", "data.train.num_workers=0", "data.train.batch_size=8",
    "data.val.dataset.num_samples=16", "data.val.batch_size=8", "task.num_fixed_samples=16",
    "task.generator.base_channels=8", "task.discriminator.base_channels=8", "device=cpu",
]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_run(tmp_path_factory.mktemp("dcgan"), CONFIG, *TINY)


def test_sample_grids_of_the_fixed_noise_reach_tensorboard(trained):
    events = EventAccumulator(str(trained / "tensorboard"), size_guidance={"images": 0, "scalars": 0})
    events.Reload()
    grids = events.Images("val/samples")
    assert [g.step for g in grids] == [2, 4]
    pixels = [cv2.imdecode(np.frombuffer(g.encoded_image_string, np.uint8), cv2.IMREAD_COLOR) for g in grids]
    side = 4 * 32 + 5 * 2  # 16 samples: 4 x 4 images of 32 pixels, 2-pixel padding
    assert pixels[-1].shape == (side, side, 3)
    # The last grid is what the checkpointed (EMA) generator makes of the checkpointed fixed noise.
    state = load_checkpoint(trained / "checkpoints/iter_4.pth")["task"]
    generator = MODELS.build({"type": "DCGANGenerator", "latent_dim": 64, "base_channels": 8, "image_size": 32})
    generator.load_state_dict({k.removeprefix("ema.generator."): v for k, v in state.items() if k.startswith("ema.generator.")})
    with torch.no_grad():
        samples = ((generator.eval()(state["fixed_noise"]) + 1) / 2).clamp(0, 1)
    expected = (make_grid(samples, nrow=4, padding=2) * 255).permute(1, 2, 0).numpy()
    assert np.abs(pixels[-1][..., ::-1].astype(float) - expected).max() <= 1.0
    assert {"train/loss_d_real", "train/loss_d_fake", "train/loss_g_adv"} <= set(events.Tags()["scalars"])


def test_checkpoint_holds_the_fixed_noise_and_the_ema_generator(trained):
    state = load_checkpoint(trained / "checkpoints/iter_4.pth")
    assert state["task"]["fixed_noise"].shape == (16, 64, 1, 1)
    assert any(k.startswith("ema.generator.") for k in state["task"])
    assert set(state["optim"]["optimizers"]) == {"generator", "discriminator"}


def test_test_tool_saves_generated_images(trained, tmp_path):
    show = tmp_path / "show"
    result = call_tool("test", "--config", CONFIG, "--checkpoint", trained / "checkpoints/iter_4.pth",
                       "--work-dir", tmp_path, "--show-dir", show, *TINY)
    assert result.returncode == 0, result.stderr
    assert "no metrics" in result.stdout
    fakes = sorted(show.glob("fake_*.png"))
    assert len(fakes) == 16 and cv2.imread(str(fakes[0])).shape == (32, 32, 3)
    assert (tmp_path / "metrics.json").is_file()


def test_networks_map_noise_to_images_and_images_to_one_logit():
    generator = MODELS.build({"type": "DCGANGenerator", "latent_dim": 16, "base_channels": 8, "image_size": 64})
    discriminator = MODELS.build({"type": "DCGANDiscriminator", "base_channels": 8, "image_size": 64})
    images = generator(torch.randn(2, 16, 1, 1))
    assert images.shape == (2, 3, 64, 64) and images.abs().max() <= 1
    assert discriminator(images).shape == (2, 1, 1, 1)
    with pytest.raises(ConfigError, match="image_size must be a power of two"):
        MODELS.build({"type": "DCGANGenerator", "image_size": 48})


def test_image_folder_lists_subfolders_and_names_an_empty_root(tmp_path):
    (tmp_path / "cats" / "small").mkdir(parents=True)
    cv2.imwrite(str(tmp_path / "cats" / "a.png"), np.zeros((8, 8, 3), np.uint8))
    cv2.imwrite(str(tmp_path / "cats" / "small" / "b.jpg"), np.zeros((8, 8, 3), np.uint8))
    (tmp_path / "cats" / "notes.txt").write_text("not an image")
    folder = DATASETS.build({"type": "ImageFolder", "root": str(tmp_path / "cats")})
    assert len(folder) == 2 and [folder[i]["name"] for i in range(2)] == ["a", "small/b"]
    assert folder[(1, 5)]["image"].shape == (3, 8, 8)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="empty: no images"):
        DATASETS.build({"type": "ImageFolder", "root": str(tmp_path / "empty")})
