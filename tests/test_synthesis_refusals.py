"""Semantic synthesis runs that would train on nothing, or on the wrong thing, without a word
(nothing-silent part 4, items 4 and 5):
- a segmenter discriminator (a loss that reads labels: `gan_loss: oasis`) with other than
  num_classes + 1 outputs: with num_classes outputs the last real class doubled as "fake", with
  more some outputs trained on nothing. Refused at build time naming both numbers, from D's
  declared outputs or, for a network that declares none, from its first output;
- label maps whose every pixel is the ignore label: D's loss 0 and every score NaN. A split with
  no labelled pixel is refused at start-up; more than half the maps without one is a warning
  naming them."""

import logging

import cv2
import numpy as np
import pytest
import torch
from test_synthesis_bad_input import config_on, dataset_node, refused, train, trains, write_scenes
from torch import nn

from framework.analysis.dataset_scan import check_label_maps
from framework.config import load_config, to_plain
from framework.errors import DataError
from framework.registry import MODELS, TASKS
from support import REPO

OASIS = REPO / "configs/synthesis/oasis_textures.yaml"


def oasis_task_node() -> dict:
    node = to_plain(load_config(OASIS))["task"]
    node["generator"] |= {"base_channels": 4, "spade_hidden": 8}
    return node


@pytest.mark.parametrize("outputs", [7, 12])
def test_a_segmenter_discriminator_without_num_classes_plus_one_outputs_is_refused(outputs):
    node = oasis_task_node()
    node["discriminator"]["num_classes"] = outputs
    with pytest.raises(Exception, match=f"task.discriminator has {outputs} outputs per pixel; a loss that reads "
                                         r"labels needs task.num_classes \+ 1 = 8"):
        TASKS.build(node, path="task")
    node["discriminator"]["num_classes"] = 8
    assert TASKS.build(node, path="task").num_classes == 7


def test_the_train_tool_refuses_it_in_one_line(tmp_path):
    line = refused("train", tmp_path / "run", "--config", OASIS, "task.discriminator.num_classes=7", "metrics=[]",
                   "train.best_metric=null", "device=cpu", "data.train.dataset.num_samples=8", "train.max_iters=1")
    assert "task.discriminator has 7 outputs per pixel; a loss that reads labels needs task.num_classes + 1 = 8" in line


class Undeclared(nn.Module):
    """A discriminator that declares no output count (no num_classes, no out_channels)."""

    def __init__(self, outputs: int):
        super().__init__()
        self.layers = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, outputs, 1))

    def forward(self, x):
        return self.layers(x)


@pytest.mark.parametrize("outputs, refused", [(7, True), (8, False), (9, True)])
def test_an_undeclared_discriminator_is_checked_on_its_first_output(outputs, refused):
    node = oasis_task_node()
    generator = MODELS.build(node.pop("generator"), path="task.generator")
    node.pop("discriminator"), node.pop("type")
    task = TASKS.get("SemanticSynthesisTask")(generator=generator, discriminator=Undeclared(outputs), **node)
    image = torch.rand(1, 3, 16, 16)
    if refused:
        with pytest.raises(ValueError, match=f"has {outputs} outputs per pixel"):
            task.discriminator(image)
    else:
        task.discriminator(image)
    assert not task.discriminator._forward_hooks  # the check ran once and left nothing behind
    task.discriminator(image)


def blank_maps(labels, names, ignore=255):
    for name in names:
        label = cv2.imread(str(labels / name), cv2.IMREAD_UNCHANGED)
        cv2.imwrite(str(labels / name), np.full_like(label, ignore))


def test_a_split_without_a_labelled_pixel_is_refused_at_start_up(tmp_path):
    _, labels = write_scenes(tmp_path / "data")
    blank_maps(labels, ["00.png", "01.png", "02.png", "03.png"])
    line = train(tmp_path, config_on(tmp_path, dataset_node(tmp_path / "data")))
    assert line == (f"data.train.dataset: none of its 4 label maps holds a labelled pixel (every pixel is "
                    f"ignore_index 255, e.g. {labels / '00.png'}): there is nothing to learn")


def test_more_than_half_the_maps_without_a_labelled_pixel_is_a_warning_naming_them(tmp_path, caplog):
    from framework.data.folder import ImageMaskFolder

    _, labels = write_scenes(tmp_path / "data")
    blank_maps(labels, ["01.png", "03.png"])
    dataset = ImageMaskFolder(root=str(tmp_path / "data"), classes=[f"c{i}" for i in range(7)])
    logging.getLogger("framework").addHandler(caplog.handler)  # the tools' logger does not propagate
    with caplog.at_level(logging.WARNING, logger="framework"):
        check_label_maps(dataset, where="data.train.dataset")  # two of four: half, no warning
    assert not caplog.records
    blank_maps(labels, ["02.png"])
    with caplog.at_level(logging.WARNING, logger="framework"):
        check_label_maps(dataset, where="data.train.dataset")
    assert [r.getMessage() for r in caplog.records] == [
        f"data.train.dataset: 3 of its 4 label maps hold no labelled pixel (every pixel is ignore_index 255): "
        f"{labels / '01.png'}, {labels / '02.png'}, {labels / '03.png'}"]
    blank_maps(labels, ["00.png"])
    with pytest.raises(DataError, match="none of its 4 label maps holds a labelled pixel"):
        check_label_maps(dataset, where="data.train.dataset")


def test_one_labelled_pixel_is_enough_to_train(tmp_path):
    _, labels = write_scenes(tmp_path / "data")
    blank_maps(labels, ["00.png", "01.png", "02.png"])
    label = np.full((32, 32), 255, np.uint8)
    label[3, 4] = 2
    cv2.imwrite(str(labels / "03.png"), label)
    trains(tmp_path / "run", config_on(tmp_path, dataset_node(tmp_path / "data")))
