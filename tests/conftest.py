"""Session fixtures: one tiny model of each kind, trained once and shared by the tool tests."""

import logging

import pytest

from support import REPO, call_tool

SEGMENTATION_CONFIG = REPO / "configs/segmentation/unet_shapes.yaml"
PIX2PIX_CONFIG = REPO / "projects/pix2pix/configs/pix2pix_shapes.yaml"

# A UNet of depth 2 (sides padded to multiples of 4) on 32x32 shapes, 4 iterations.
TINY_UNET_RUN = [
    "device=cpu", "task.model.base_channels=8", "task.model.depth=2", "train.max_iters=4",
    "train.val_interval=4", "train.ckpt_interval=4", "train.log_interval=2", "data.train.dataset.size=32",
    "data.train.dataset.num_samples=16", "data.train.batch_size=4", "data.train.num_workers=0",
    "data.val.dataset.size=32", "data.val.dataset.num_samples=8", "data.val.batch_size=8",
]
TINY_PIX2PIX_RUN = [
    "device=cpu", "train.max_iters=2", "train.val_interval=2", "train.val_at_start=false",
    "train.ckpt_interval=2", "train.log_interval=1", "data.train.dataset.num_samples=8",
    "data.train.dataset.size=32", "data.train.batch_size=4", "data.val.dataset.num_samples=4",
    "data.val.dataset.size=32", "data.val.batch_size=4", "task.generator.num_downs=3",
    "task.generator.base_channels=8", "task.discriminator.base_channels=8", "+task.ema_decay=0.9",
]
DCGAN_CONFIG = REPO / "projects/dcgan/configs/dcgan_shapes.yaml"
TINY_DCGAN_RUN = [
    "device=cpu", "train.max_iters=2", "train.val_interval=0", "train.ckpt_interval=2", "train.log_interval=1",
    "data.train.dataset.num_samples=8", "data.train.batch_size=4", "data.train.num_workers=0",
    "task.generator.base_channels=8", "task.discriminator.base_channels=8", "task.num_fixed_samples=4",
    "task.ema_start=0",
]


class Run:
    """A finished run: its resolved config (work_dir/config.yaml) and its last checkpoint."""

    def __init__(self, work_dir):
        self.work_dir = work_dir
        self.config = work_dir / "config.yaml"
        self.checkpoint = work_dir / "checkpoints" / (work_dir / "checkpoints" / "latest").read_text().strip()

    def args(self):
        return ["--config", self.config, "--checkpoint", self.checkpoint]


def _train(tmp_path_factory, name, config, overrides) -> Run:
    work_dir = tmp_path_factory.mktemp(name)
    result = call_tool("train", "--config", config, "--work-dir", work_dir, *overrides)
    assert result.returncode == 0, result.stderr
    return Run(work_dir)


@pytest.fixture(scope="session")
def unet_run(tmp_path_factory) -> Run:
    return _train(tmp_path_factory, "unet", SEGMENTATION_CONFIG, TINY_UNET_RUN)


@pytest.fixture(scope="session")
def pix2pix_run(tmp_path_factory) -> Run:
    return _train(tmp_path_factory, "pix2pix", PIX2PIX_CONFIG, TINY_PIX2PIX_RUN)


@pytest.fixture(scope="session")
def dcgan_run(tmp_path_factory) -> Run:
    return _train(tmp_path_factory, "dcgan", DCGAN_CONFIG, TINY_DCGAN_RUN)


@pytest.fixture
def framework_log(caplog):
    """caplog holding the `framework` logger's records from INFO up: that logger does not propagate
    to pytest's root handler once a tool in this process has set up logging (engine/cli.py)."""
    logger = logging.getLogger("framework")
    caplog.set_level(logging.INFO, logger="framework")
    propagate, logger.propagate = logger.propagate, False  # each record once, through caplog's handler
    logger.addHandler(caplog.handler)
    yield caplog
    logger.removeHandler(caplog.handler)
    logger.propagate = propagate
