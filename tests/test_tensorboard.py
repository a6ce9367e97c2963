"""TensorBoard files read back: hparams with metrics, per-class IoU in its own group, the
confusion-matrix image, GAN D-logit and gradient-norm scalars; GAN health warnings."""

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from framework.tasks.gan_health import GANHealth
from support import REPO, TINY_UNET, train_run

SEGMENTATION = REPO / "configs/segmentation/unet_shapes.yaml"
PIX2PIX = REPO / "projects/pix2pix/configs/pix2pix_shapes.yaml"


def events(work_dir) -> EventAccumulator:
    accumulator = EventAccumulator(str(work_dir / "tensorboard"), size_guidance={"images": 0, "scalars": 0})
    accumulator.Reload()
    return accumulator


@pytest.fixture(scope="module")
def segmentation_run(tmp_path_factory):
    return train_run(tmp_path_factory.mktemp("seg_tb"), SEGMENTATION, *TINY_UNET, "data.train.num_workers=0",
                     "train.max_iters=4", "train.val_interval=2", "train.log_interval=2", "train.ckpt_interval=4",
                     "train.best_metric=mIoU")


def hparams_session(accumulator):
    content = accumulator.PluginTagToContent("hparams")
    data = {tag: plugin_data_pb2.HParamsPluginData.FromString(raw) for tag, raw in content.items()}
    experiment = next(d.experiment for d in data.values() if d.HasField("experiment"))
    start = next(d.session_start_info for d in data.values() if d.HasField("session_start_info"))
    return experiment, start


def test_hparams_hold_key_settings_and_the_metrics(segmentation_run):
    accumulator = events(segmentation_run)
    experiment, start = hparams_session(accumulator)
    metrics = {m.name.tag for m in experiment.metric_infos}
    assert {"val/mIoU", "val/mAcc", "val/aAcc", "best/mIoU"} <= metrics
    assert not any("IoU." in tag for tag in metrics)  # per-class values are not run summaries
    settings = start.hparams
    assert settings["task.model.type"].string_value == "UNet"
    assert settings["task.model.base_channels"].number_value == 8
    assert settings["optim.type"].string_value == "AdamW" and settings["batch_size"].number_value == 4
    # the metrics' values are the scalars at those tags
    scalars = set(accumulator.Tags()["scalars"])
    assert {"val/mIoU", "best/mIoU"} <= scalars
    best = [s.value for s in accumulator.Scalars("best/mIoU")]
    assert best == sorted(best) and best[-1] == max(s.value for s in accumulator.Scalars("val/mIoU"))


def test_per_class_iou_has_its_own_group_and_the_confusion_matrix_is_an_image(segmentation_run):
    accumulator = events(segmentation_run)
    scalars = accumulator.Tags()["scalars"]
    assert {"val_per_class/IoU.background", "val_per_class/Acc.circle"} <= set(scalars)
    assert not any(tag.startswith("val/IoU.") for tag in scalars)
    matrices = accumulator.Images("val/confusion_matrix")
    assert [m.step for m in matrices] == [2, 4]
    assert matrices[0].width == matrices[0].height == 4 * 32  # 4 classes, 32-pixel cells
    assert [m.step for m in accumulator.Images("val/predictions")] == [2, 4]


def test_gan_logs_discriminator_logits_gradient_norms_and_output_spread(tmp_path):
    run = train_run(tmp_path, PIX2PIX, "device=cpu", "train.max_iters=4", "train.val_interval=0",
                    "train.val_at_start=false", "train.ckpt_interval=4", "train.log_interval=2",
                    "data.train.dataset.num_samples=16", "data.train.dataset.size=32", "data.train.batch_size=4",
                    "task.generator.num_downs=5", "task.generator.base_channels=8",
                    "task.discriminator.base_channels=8")
    accumulator = events(run)
    scalars = set(accumulator.Tags()["scalars"])
    assert {"train/d_real_logit", "train/d_fake_logit", "train/fake_spread",
            "train/grad_norm_generator", "train/grad_norm_discriminator"} <= scalars
    assert [s.step for s in accumulator.Scalars("train/grad_norm_generator")] == [2, 4]
    assert all(s.value > 0 for s in accumulator.Scalars("train/grad_norm_discriminator"))


def test_gan_health_warns_once_when_d_wins_or_outputs_collapse_for_a_window():
    health = GANHealth(window=3)
    healthy = {"loss_d": 0.6, "fake_spread": 0.3, "d_real_logit": 0.2, "d_fake_logit": -0.1}
    d_wins = {**healthy, "loss_d": 1e-4, "d_real_logit": 9.0, "d_fake_logit": -9.0}
    collapsed = {**healthy, "fake_spread": 1e-4}
    assert [health.check(d_wins) for _ in range(2)] == [[], []]
    third = health.check(d_wins)
    assert len(third) == 1 and "discriminator wins outright: loss_d 1.00e-04" in third[0] and "real 9.00" in third[0]
    assert health.check(d_wins) == []  # once per episode
    assert health.check(healthy) == []
    assert [len(health.check(collapsed)) for _ in range(4)] == [0, 0, 1, 0]
    assert GANHealth(watch_d_loss=False, window=1).check(d_wins) == []  # wgan-gp's critic loss is unbounded


def test_gan_health_defaults_floors_and_whole_messages():
    """Floors 0.01, a window of 3 log intervals; the floor itself is no alarm; without logits
    the message says nan."""
    at_floor, below = {"loss_d": 0.01, "fake_spread": 0.01}, {"loss_d": 0.0099, "fake_spread": 0.0099}
    health = GANHealth()
    assert [health.check(at_floor) for _ in range(4)] == [[], [], [], []]
    health = GANHealth()  # a fresh run whose first intervals already collapse: warned at the third
    warned = [health.check(below) for _ in range(3)]
    assert warned[:2] == [[], []] and warned[2] == [
        "warning: the discriminator wins outright: loss_d 9.90e-03 < 0.01 for 3 log intervals (D logits real nan, "
        "fake nan); the generator gets no useful gradient. Lower D's learning rate, raise d_weight's counterpart "
        "adv_weight, or add noise/dropout to D",
        "warning: the generator's outputs collapse: fake_spread 9.90e-03 < 0.01 across the batch for 3 log intervals "
        "(mode collapse)"]
