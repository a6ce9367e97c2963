"""SPADE's instance-edge channel: the edge map against a hand-computed 4-neighbour map, Cityscapes'
edges computed from its 16-bit instanceIds after the pipeline moved them with the labels, and the
synthesis task and generator taking the channel (both, or a one-line refusal)."""

import inspect

import numpy as np
import pytest
import torch
from PIL import Image

import framework  # noqa: F401  (fills the registries)
from framework.data.published.cityscapes import instance_edges
from framework.data.published.fixture_trees import write_fixture_tree
from framework.errors import ConfigError, DataError
from framework.registry import DATASETS, MODELS, TASKS
from support import REPO, call_tool

SPADE_CITYSCAPES = REPO / "configs/synthesis/spade_cityscapes.yaml"


def test_instance_edges_match_a_hand_computed_four_neighbour_map():
    instances = np.array([[1, 1, 2],
                          [1, 1, 2],
                          [3, 3, 3]], dtype=np.uint16)
    expected = np.array([[0, 1, 1],
                         [1, 1, 1],
                         [1, 1, 1]], dtype=np.uint8)
    np.testing.assert_array_equal(instance_edges(instances), expected)
    np.testing.assert_array_equal(instance_edges(np.full((3, 4), 26000, np.uint16)), np.zeros((3, 4), np.uint8))
    diagonal = np.array([[5, 6], [6, 5]], dtype=np.uint16)  # every pixel differs from its 4-neighbours
    np.testing.assert_array_equal(instance_edges(diagonal), np.ones((2, 2), np.uint8))
    column = np.array([[24001], [24001], [24002]], dtype=np.uint16)  # 16-bit ids, only vertical neighbours
    np.testing.assert_array_equal(instance_edges(column), np.array([[0], [1], [1]], np.uint8))
    # a boundary near the start of a long row or column: each pixel against its own neighbour only
    np.testing.assert_array_equal(instance_edges(np.array([[1, 2, 2, 2]])), np.array([[1, 1, 0, 0]], np.uint8))
    np.testing.assert_array_equal(instance_edges(np.array([[5], [6], [6], [6]])), np.array([[1], [1], [0], [0]]))
    # left-right edges in every row, none up-down: the second pass keeps the first's
    np.testing.assert_array_equal(instance_edges(np.array([[1, 2], [1, 2]])), np.ones((2, 2), np.uint8))
    assert instance_edges(instances).dtype == np.uint8


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return write_fixture_tree("cityscapes", tmp_path_factory.mktemp("cityscapes"), samples=2)


def test_cityscapes_edges_follow_the_pipeline_with_the_labels(tree):
    dataset = DATASETS.build({"type": "Cityscapes", "root": str(tree), "labels": "synthesis", "instance_edges": True,
                              "pipeline": [{"type": "HorizontalFlip", "p": 1.0}]})
    instances = np.full((32, 64), 7, np.uint16)  # road, and one car off to the left: edges not mirror-symmetric
    instances[3:9, 5:12] = 26001
    Image.fromarray(instances).save(str(dataset.mask_path(0)).replace("_labelIds.png", "_instanceIds.png"))
    sample = dataset[0]
    assert not np.array_equal(instance_edges(instances), instance_edges(instances[:, ::-1]))
    np.testing.assert_array_equal(sample["edges"].numpy(), instance_edges(instances[:, ::-1]))
    np.testing.assert_array_equal(sample["mask"].numpy(), np.asarray(Image.open(dataset.mask_path(0)))[:, ::-1])
    assert "edges" not in DATASETS.build({"type": "Cityscapes", "root": str(tree), "labels": "synthesis"})[0]
    with pytest.raises(ConfigError, match="instance_edges: SPADE's instance-edge channel is for labels: synthesis"):
        DATASETS.build({"type": "Cityscapes", "root": str(tree), "instance_edges": True})


def test_samples_with_edges_are_the_samples_without_them_plus_the_edges(tree):
    pipeline = [{"type": "RandomCrop", "height": 24, "width": 40}, {"type": "HorizontalFlip", "p": 0.5}]
    spec = {"type": "Cityscapes", "root": str(tree), "labels": "synthesis", "pipeline": pipeline}
    with_edges, plain = DATASETS.build({**spec, "instance_edges": True}), DATASETS.build(spec)
    for item in ((0, 11), (1, 12), 1):
        sample, expected = with_edges[item], plain[item]
        assert sorted(sample) == ["edges", "image", "index", "mask", "name"]
        for key in ("image", "mask"):
            torch.testing.assert_close(sample[key], expected[key])
        assert (sample["index"], sample["name"]) == (expected["index"], expected["name"])
        assert sample["edges"].shape == sample["mask"].shape and sample["edges"].dtype == torch.uint8


def test_an_instance_map_or_image_of_another_size_is_named(tree, tmp_path):
    import shutil

    root = shutil.copytree(tree, tmp_path / "copy")
    dataset = DATASETS.build({"type": "Cityscapes", "root": str(root), "labels": "synthesis", "instance_edges": True})
    instance_path = str(dataset.mask_path(0)).replace("_labelIds.png", "_instanceIds.png")
    Image.fromarray(np.zeros((16, 64), np.uint16)).save(instance_path)
    with pytest.raises(DataError, match=rf"^{instance_path}: the instance map is 16x64 but its labels are 32x64$"):
        dataset[0]
    Image.fromarray(np.zeros((16, 32, 3), np.uint8)).save(dataset.image_path(1))
    with pytest.raises(DataError, match=rf"^{dataset.mask_path(1)}: mask is 32x64 but its image is 16x32$"):
        dataset[1]


def tiny_task(generator_edges: bool, task_edges: bool):
    generator = MODELS.build({"type": "SPADEGenerator", "num_classes": 35, "image_size": 32, "base_channels": 8,
                              "num_up_layers": 2, "noise_dim": 0, "spade_hidden": 8,
                              "instance_edges": generator_edges})
    discriminator = MODELS.build({"type": "MultiScaleDiscriminator", "in_channels": 35 + int(generator_edges) + 3,
                                  "num_scales": 1, "base_channels": 8, "num_layers": 2})
    return TASKS.get("SemanticSynthesisTask")(generator, discriminator, num_classes=35, instance_edges=task_edges)


def test_the_task_and_generator_take_the_edge_channel_after_the_one_hot_map():
    task = tiny_task(True, True)
    assert task.generator.label_channels == 36
    mask = torch.randint(0, 35, (2, 8, 8))
    edges = torch.from_numpy(instance_edges(np.random.default_rng(0).integers(0, 3, (2, 8, 8))))
    condition = task.label_input({"mask": mask, "edges": edges})
    assert condition.shape == (2, 36, 8, 8)
    torch.testing.assert_close(condition[:, 35], edges.float())
    torch.testing.assert_close(condition[:, :35], task.one_hot(mask))
    with pytest.raises(ConfigError, match="task.instance_edges: the batches carry no instance edges"):
        task.label_input({"mask": mask})
    with pytest.raises(ValueError, match="instance_edges True differs from the generator's"):
        tiny_task(False, True)
    with pytest.raises(ConfigError, match="tools/infer.py and export give it label maps alone"):
        task.deployable()


def test_spade_cityscapes_trains_two_iterations_with_instance_edges(tree, tmp_path):
    small = "[{type: Resize, height: 128, width: 256}]"
    result = call_tool("train", "--config", SPADE_CITYSCAPES, "--work-dir", tmp_path / "run", "device=cpu",
                       f"data.train.dataset.root={tree}", "train.max_iters=2", "train.val_interval=2",
                       "train.ckpt_interval=2", "loggers=[]", "data.train.num_workers=0", "data.val.num_workers=0",
                       f"data.train.dataset.pipeline={small}", f"data.val.dataset.pipeline={small}",
                       "task.generator.image_size=[128,256]", "task.generator.base_channels=16",
                       "task.generator.spade_hidden=16", "task.discriminator.base_channels=16",
                       "+data.train.dataset.instance_edges=true", "+data.val.dataset.instance_edges=true",
                       "+task.instance_edges=true", "+task.generator.instance_edges=true",
                       "task.generator.contain_dontcare_label=false", "task.discriminator.in_channels=39",
                       "task.perceptual.weights=random", "task.perceptual.layers={relu1_1: 1.0}")
    assert result.returncode == 0, result.stderr + result.stdout[-2000:]
    assert (tmp_path / "run/checkpoints/iter_2.pth").is_file()


SMALL_SPADE = ["device=cpu", "train.max_iters=1", "loggers=[]", "data.train.num_workers=0", "data.val.num_workers=0",
               "data.train.dataset.pipeline=[{type: Resize, height: 128, width: 256}]",
               "data.val.dataset.pipeline=[{type: Resize, height: 128, width: 256}]",
               "task.generator.image_size=[128,256]", "task.generator.base_channels=8", "task.generator.spade_hidden=8",
               "task.discriminator.base_channels=8", "task.perceptual.weights=random",
               "task.perceptual.layers={relu1_1: 1.0}"]


@pytest.mark.parametrize("edges", ["dataset", "task"])
def test_edges_on_one_side_only_are_refused_at_start_up_in_one_line(tree, tmp_path, edges):
    """The dataset's edges without the task's were computed and dropped, the run training without them."""
    sides = (["+data.train.dataset.instance_edges=true", "+data.val.dataset.instance_edges=true"] if edges == "dataset"
             else ["+task.instance_edges=true", "+task.generator.instance_edges=true",
                   "task.generator.contain_dontcare_label=false", "task.discriminator.in_channels=39"])
    result = call_tool("train", "--config", SPADE_CITYSCAPES, "--work-dir", tmp_path / "run",
                       f"data.train.dataset.root={tree}", *SMALL_SPADE, *sides)
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0 and len(lines) == 1, result.stderr
    assert "data.train.dataset.instance_edges" in lines[0] and "task.instance_edges" in lines[0]
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").rglob("*.pth"))


def test_a_string_where_a_boolean_is_wanted_is_refused_for_every_boolean_keyword(tree):
    """'false' is truthy: `bool("false")` read task.instance_edges='false' as true. Every registered
    component's keyword annotated bool is typed by the registry's build, not by each constructor."""
    from framework.keywords import BOOLEAN_ANNOTATIONS, check_booleans
    from framework.registry import _ALL_REGISTRIES

    with pytest.raises(ConfigError, match=r"^datasets\.instance_edges: expected true or false, got 'false'$"):
        DATASETS.build({"type": "Cityscapes", "root": str(tree), "labels": "synthesis", "instance_edges": "false"})
    with pytest.raises(ConfigError, match=r"^task\.instance_edges: expected true or false, got 'false'$"):
        TASKS.build({"type": "SemanticSynthesisTask", "num_classes": 35, "instance_edges": "false",
                     "generator": {"type": "SPADEGenerator", "num_classes": 35, "image_size": 32, "noise_dim": 0},
                     "discriminator": {"type": "MultiScaleDiscriminator", "in_channels": 38}}, path="task")
    typed = 0
    for registry in _ALL_REGISTRIES:
        for name in registry.names():
            factory = registry.get(name)
            try:
                parameters = inspect.signature(factory).parameters.values()
            except (TypeError, ValueError):
                continue
            for parameter in parameters:
                annotation = parameter.annotation
                text = (annotation if isinstance(annotation, str) else inspect.formatannotation(annotation))
                if isinstance(parameter.default, bool):  # a flag: typed, so the build checks it
                    assert text.replace("typing.", "") in BOOLEAN_ANNOTATIONS, f"{name}.{parameter.name}: {text}"
                if text.replace("typing.", "") in BOOLEAN_ANNOTATIONS:
                    typed += 1
                    for bad in ("false", "true", 0, 1):
                        with pytest.raises(ConfigError, match=rf"^{name}\.{parameter.name}: expected true or false"):
                            check_booleans(factory, {parameter.name: bad}, name)
                    check_booleans(factory, {parameter.name: False}, name)
    assert typed > 50
