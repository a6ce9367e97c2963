"""Bad input to a semantic synthesis run, on real folders of PNGs: label values outside the
classes, a label map without its image (and an image without its label map), a pair of different
sizes, a SegmenterScore whose segmenter has another class count, data of a size the generator does
not train at or cannot draw. tools/train.py (and tools/test.py, which evaluates) refuse each in one
`error:` line naming the file, key and value, exit status 2, before writing anything of the run:
the work dir holds nothing but the log of the start (no config.yaml, checkpoint, TensorBoard
file, metrics), as for the other start-up checks (tests/test_startup_checks.py). Boundaries both
ways: class num_classes - 1 and the ignore label train, num_classes is refused; the smallest size
the generator's depth draws trains, one pixel less is refused. And browse_dataset and
check_dataset on synthesis data."""

import copy

import cv2
import numpy as np
import pytest
import torch
import yaml

from framework.checkpoint.files import save_checkpoint
from framework.config import load_config, to_plain
from framework.registry import TASKS
from framework.visualization.palette import default_palette
from support import REPO, call_tool

SPADE = REPO / "configs/synthesis/spade_textures.yaml"
SEGMENTER = REPO / "configs/segmentation/unet_textures.yaml"
CLASSES = [f"c{i}" for i in range(7)]
RUN = ["device=cpu", "amp.enabled=false", "train.max_iters=2", "train.ckpt_interval=2", "train.val_interval=2",
       "train.val_at_start=false", "train.log_interval=1", "data.train.num_workers=0", "data.val.num_workers=0",
       "data.train.batch_size=2", "data.val.batch_size=2", "task.generator.image_size=32",
       "task.generator.base_channels=4", "task.generator.num_up_layers=2", "task.generator.spade_hidden=8",
       "task.discriminator.base_channels=4", "task.discriminator.num_layers=2", "metrics=[{type: PSNR}]",
       "train.best_metric=PSNR"]
LAYOUTS = {"ImageMaskFolder": ("images", "masks"), "LabelImageFolders": ("images", "labels")}


def write_scenes(root, layout="ImageMaskFolder", size=(32, 32), count=4, classes=7):
    """`count` RGB images and their label maps (class ids 0..classes - 1; every map holds the largest
    class and 255, the ignore label); returns (image folder, label folder)."""
    images, labels = (root / sub for sub in LAYOUTS[layout])
    images.mkdir(parents=True)
    labels.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(count):
        cv2.imwrite(str(images / f"{i:02d}.png"), rng.integers(0, 256, (*size, 3), dtype=np.uint8))
        label = rng.integers(0, classes, size, dtype=np.uint8)
        label[0, :2] = classes - 1, 255
        cv2.imwrite(str(labels / f"{i:02d}.png"), label)
    return images, labels


def dataset_node(root, layout="ImageMaskFolder", **extra) -> dict:
    images, labels = (root / sub for sub in LAYOUTS[layout])
    folders = ({"root": str(root)} if layout == "ImageMaskFolder"
               else {"label_dir": str(labels), "image_dir": str(images)})
    return {"type": layout, **folders, "classes": CLASSES, **extra}


def config_on(tmp_path, node: dict, val: dict | None = None):
    """The SPADE config trained on `node` and evaluated on `val` (default: the same data)."""
    path = tmp_path / "synthesis.yaml"
    data = {"train": {"dataset": node}, "val": {"dataset": copy.deepcopy(val or node)}}  # no YAML alias
    path.write_text(yaml.safe_dump({"_base_": [str(SPADE)], "data": data}))
    return path


def left_in(work_dir) -> list[str]:
    return sorted(str(p.relative_to(work_dir)) for p in work_dir.rglob("*")) if work_dir.exists() else []


def refused(tool: str, work_dir, *args, log="train.log") -> str:
    """The one error line of a refused start, checked to have written nothing but its log."""
    result = call_tool(tool, *args, "--work-dir", work_dir)
    assert result.returncode == 2, result.stderr + result.stdout[-2000:]
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.stdout, result.stderr
    assert left_in(work_dir) in ([], [log]), left_in(work_dir)
    return lines[0][len("error: "):]


def train(tmp_path, config, *overrides):
    return refused("train", tmp_path / "run", "--config", config, *RUN, *overrides)


def trains(work_dir, config, *overrides) -> None:
    result = call_tool("train", "--config", config, "--work-dir", work_dir, *RUN, *overrides)
    assert result.returncode == 0, result.stderr + result.stdout[-2000:]
    assert (work_dir / "checkpoints" / "iter_2.pth").is_file()


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_label_value_of_num_classes_is_refused_naming_the_file_and_num_classes_minus_one_trains(layout, tmp_path):
    _, labels = write_scenes(tmp_path / "data", layout)
    label = cv2.imread(str(labels / "03.png"), cv2.IMREAD_UNCHANGED)  # not among the two samples read first
    label[5, 5] = 7
    cv2.imwrite(str(labels / "03.png"), label)
    config = config_on(tmp_path, dataset_node(tmp_path / "data", layout))
    assert train(tmp_path, config) == f"{labels / '03.png'}: mask values [7] outside [0, 7) (ignore_index 255)"
    label[5, 5] = 6
    cv2.imwrite(str(labels / "03.png"), label)
    trains(tmp_path / "fixed", config)


@pytest.mark.parametrize("layout, lone", [("ImageMaskFolder", "label"), ("ImageMaskFolder", "image"),
                                          ("LabelImageFolders", "label"), ("LabelImageFolders", "image")])
def test_a_label_map_without_its_image_and_an_image_without_its_label_map(layout, lone, tmp_path):
    images, labels = write_scenes(tmp_path / "data", layout)
    (images if lone == "label" else labels).joinpath("02.png").unlink()
    line = train(tmp_path, config_on(tmp_path, dataset_node(tmp_path / "data", layout)))
    expected = {
        ("ImageMaskFolder", "label"): f"data.train.dataset (ImageMaskFolder): {images}: no image for 1 sample(s): 02",
        ("ImageMaskFolder", "image"): f"data.train.dataset (ImageMaskFolder): {labels}: no mask (.png) for 1 "
                                      "sample(s): 02",
        ("LabelImageFolders", "label"): f"data.train.dataset (LabelImageFolders): 1 label file(s) in {labels} have "
                                        f"no image in {images}: 02.png",
        ("LabelImageFolders", "image"): f"data.train.dataset (LabelImageFolders): 1 image(s) in {images} have no "
                                        f"label file in {labels}: 02.png",
    }
    assert line == expected[layout, lone]


@pytest.mark.parametrize("layout, extra", [("ImageMaskFolder", {}), ("LabelImageFolders", {}),
                                           ("LabelImageFolders", {"check_sizes": False})])
def test_a_label_map_one_pixel_narrower_than_its_image_is_refused_naming_both_sizes(layout, extra, tmp_path):
    _, labels = write_scenes(tmp_path / "data", layout)
    cv2.imwrite(str(labels / "03.png"), np.zeros((32, 31), np.uint8))
    line = train(tmp_path, config_on(tmp_path, dataset_node(tmp_path / "data", layout, **extra)))
    if layout == "LabelImageFolders" and not extra:  # its own check when built, on the file headers
        assert line.endswith(f"1 label/image pair(s) differ in size in {labels} and {tmp_path / 'data/images'}: "
                             "03 (image 32x32, label 32x31)")
    else:  # the start-up pass over every label map
        assert line == f"{labels / '03.png'}: mask is 32x31 but its image is 32x32"


def test_dataset_classes_or_ignore_label_other_than_the_tasks_are_refused(tmp_path):
    write_scenes(tmp_path / "data")
    config = config_on(tmp_path, dataset_node(tmp_path / "data"))
    assert train(tmp_path, config, "data.train.dataset.classes=[c0,c1,c2,c3,c4,c5,c6,c7]") == (
        "data.train.dataset: 8 classes (c0, c1, c2, c3, c4, c5, c6, c7), task.num_classes 7: the label maps must "
        "have the classes the generator is built for; give both the same classes")
    write_scenes(tmp_path / "six", classes=6)  # maps of classes 0..5: fewer classes than the task's 7, refused too
    fewer = config_on(tmp_path / "six", dataset_node(tmp_path / "six", classes=CLASSES[:6]))
    assert train(tmp_path / "six", fewer).startswith("data.train.dataset: 6 classes (c0, c1, c2, c3, c4, c5), "
                                                     "task.num_classes 7: the label maps must have the classes")
    assert train(tmp_path, config, "+task.ignore_index=254") == (
        "data.train.dataset.ignore_index: 255, task.ignore_index 254: the don't-care label must be the same in both")


@pytest.mark.parametrize("size, overrides, expected", [
    ((48, 48), [], "data.train.dataset: samples are 48x48 after the pipeline (sample 00), task.generator.image_size "
                   "is 32x32: resize or crop them to it in data.train.dataset.pipeline, or set "
                   "task.generator.image_size: [48, 48]"),
    ((15, 15), ["task.generator.image_size=16", "task.generator.num_up_layers=4"],
     "data.train.dataset: samples are 15x15 after the pipeline (sample 00), task.generator.image_size is 16x16, and "
     "15x15 is no size the generator draws (task.generator.num_up_layers 4: both sides must be multiples of "
     "2**num_up_layers = 16): resize or crop them to 16x16 in data.train.dataset.pipeline"),
    ((32, 32), ["+data.val.dataset.pipeline=[{type: CenterCrop, height: 30, width: 32}]"],
     "data.val.dataset: samples are 30x32 after the pipeline (sample 00), a size the generator cannot draw "
     "(task.generator.num_up_layers 2: both sides must be multiples of 2**num_up_layers = 4): resize or crop them "
     "to such a size in data.val.dataset.pipeline"),
], ids=["other-than-image_size", "one-below-the-smallest", "evaluation-data"])
def test_data_of_a_size_the_generator_does_not_train_at_is_refused_naming_the_key(size, overrides, expected, tmp_path):
    write_scenes(tmp_path / "data", size=size)
    assert train(tmp_path, config_on(tmp_path, dataset_node(tmp_path / "data")), *overrides) == expected


def test_the_smallest_size_the_generators_depth_draws_trains_and_evaluation_data_of_another_fitting_size(tmp_path):
    write_scenes(tmp_path / "data", size=(16, 16))
    write_scenes(tmp_path / "val", size=(32, 48))  # evaluation draws at the data's size
    config = config_on(tmp_path, dataset_node(tmp_path / "data"), dataset_node(tmp_path / "val"))
    trains(tmp_path / "run", config, "task.generator.image_size=16", "task.generator.num_up_layers=4",
           "task.discriminator.num_scales=1")


def save_segmenter(path, classes: int, with_config: bool) -> None:
    """A tiny textures segmenter of `classes` classes as a training checkpoint (with the config it
    was trained with, as tools/train.py saves it) or as a task state dict saved alone."""
    plain = to_plain(load_config(str(SEGMENTER), segmenter_overrides(classes)))
    torch.manual_seed(0)
    state = TASKS.build(plain["task"]).state_dict()
    if with_config:
        save_checkpoint({"meta": {"config": yaml.safe_dump(plain)}, "task": state, "optim": {}, "rng": {}}, path)
    else:
        torch.save(state, path)


def segmenter_overrides(classes: int) -> list[str]:
    return ["task.model.base_channels=4", "task.model.depth=1", f"task.num_classes={classes}",
            f"task.model.num_classes={classes}", "task.class_names=null"]


def segmenter_config(path, classes: int):
    path.write_text(yaml.safe_dump(to_plain(load_config(str(SEGMENTER), segmenter_overrides(classes)))))
    return path


def score(config, checkpoint) -> str:
    return (f"metrics=[{{type: SegmenterScore, num_classes: 7, config: {config}, checkpoint: {checkpoint}}}]")


@pytest.fixture(scope="module")
def segmenters(tmp_path_factory):
    folder = tmp_path_factory.mktemp("segmenters")
    save_segmenter(folder / "seven.pth", 7, with_config=True)
    save_segmenter(folder / "five.pth", 5, with_config=True)
    save_segmenter(folder / "five_state.pth", 5, with_config=False)
    return folder, segmenter_config(folder / "seven.yaml", 7), segmenter_config(folder / "five.yaml", 5)


def segmenter_cases(segmenters) -> dict:
    folder, seven, five = segmenters
    return {
        "config-of-5": (score(five, folder / "five.pth"),
                        f"metrics[0] (SegmenterScore): num_classes: the segmenter of {five} has 5 classes, the "
                        "synthesis 7; score with a segmenter of the same classes"),
        "checkpoint-of-5": (score(seven, folder / "five.pth"),
                            f"metrics[0] (SegmenterScore): checkpoint: {folder / 'five.pth'} is a segmenter of 5 "
                            "classes (task.num_classes of the config saved in it), the synthesis has 7; score "
                            "with a segmenter trained on the synthesis classes"),
        "weights-of-5": (score(seven, folder / "five_state.pth"),
                         f"metrics[0] (SegmenterScore): {folder / 'five_state.pth'} does not fit the model of "
                         f"{seven}: its output layer has 5 outputs, task.model.num_classes is 7: the checkpoint is "
                         "of a segmenter of another class count (size mismatch for head.weight: "),
    }


@pytest.mark.parametrize("case", ["config-of-5", "checkpoint-of-5", "weights-of-5"])
def test_a_segmenter_of_another_class_count_is_refused_before_the_first_iteration(segmenters, case, tmp_path):
    write_scenes(tmp_path / "data")
    metric, expected = segmenter_cases(segmenters)[case]
    line = train(tmp_path, config_on(tmp_path, dataset_node(tmp_path / "data")), metric, "train.best_metric=mIoU_fake")
    assert line.startswith(expected), line  # no checkpoint: refused at start-up, not at the first evaluation


@pytest.fixture(scope="module")
def synthesis_run(tmp_path_factory, segmenters):
    """A finished tiny run on clean folders, scored by the 7-class segmenter (which trains with it)."""
    tmp = tmp_path_factory.mktemp("synthesis")
    write_scenes(tmp / "data")
    folder, seven, _ = segmenters
    config = config_on(tmp, dataset_node(tmp / "data"))
    trains(tmp / "run", config, score(seven, folder / "seven.pth"), "train.best_metric=mIoU_fake")
    return tmp, config


@pytest.mark.parametrize("case", ["label-value", "size", "segmenter"])
def test_test_py_refuses_the_same_before_metrics_json_and_the_first_image(synthesis_run, segmenters, case, tmp_path):
    tmp, config = synthesis_run
    folder, seven, _ = segmenters
    overrides = [*RUN, score(seven, folder / "seven.pth")]
    if case == "label-value":
        _, labels = write_scenes(tmp_path / "val")
        label = cv2.imread(str(labels / "03.png"), cv2.IMREAD_UNCHANGED)  # in the second batch of two
        label[0, 0] = 9
        cv2.imwrite(str(labels / "03.png"), label)
        overrides.append(f"data.val.dataset.root={tmp_path / 'val'}")
        expected = f"{labels / '03.png'}: mask values [9] outside [0, 7) (ignore_index 255)"
    elif case == "size":
        overrides.append("+data.val.dataset.pipeline=[{type: CenterCrop, height: 32, width: 31}]")
        expected = "data.val.dataset: samples are 32x31 after the pipeline (sample 00), a size the generator cannot draw"
    else:
        overrides[-1] = score(seven, folder / "five.pth")
        expected = segmenter_cases(segmenters)["checkpoint-of-5"][1]
    line = refused("test", tmp_path / "test", "--config", config, "--checkpoint", tmp / "run/checkpoints/iter_2.pth",
                   "--show-dir", tmp_path / "show", *overrides, log="test.log")
    assert line.startswith(expected), line
    assert left_in(tmp_path / "show") == []


def test_browse_dataset_shows_each_label_map_colourised_beside_its_image(tmp_path):
    images, labels = write_scenes(tmp_path / "data", "LabelImageFolders", size=(32, 48), count=3)
    config = config_on(tmp_path, dataset_node(tmp_path / "data", "LabelImageFolders"))
    result = call_tool("browse_dataset", "--config", config, "--output", tmp_path / "grids", "--split", "val",
                       "--num", "3", "--rows", "3", "data.val.num_workers=0")
    assert result.returncode == 0, result.stderr
    grid = cv2.cvtColor(cv2.imread(str(tmp_path / "grids/grid_000.png")), cv2.COLOR_BGR2RGB)
    assert grid.shape == (3 * 32, 3 * 48, 3)  # a row per sample: image | label map | overlay
    colours = np.vstack([default_palette(7), [255, 255, 255]]).astype(np.uint8)  # the ignore label in white
    for row in range(3):
        image = cv2.cvtColor(cv2.imread(str(images / f"{row:02d}.png")), cv2.COLOR_BGR2RGB)
        label = cv2.imread(str(labels / f"{row:02d}.png"), cv2.IMREAD_UNCHANGED)
        cells = grid[row * 32:(row + 1) * 32]
        assert np.array_equal(cells[:, :48], image)
        assert np.array_equal(cells[:, 48:96], colours[np.where(label == 255, 7, label)])


def test_check_dataset_names_every_bad_label_map_of_synthesis_folders(tmp_path):
    _, labels = write_scenes(tmp_path / "data", "LabelImageFolders")
    config = config_on(tmp_path, dataset_node(tmp_path / "data", "LabelImageFolders", check_sizes=False))
    clean = call_tool("check_dataset", "--config", config)
    assert clean.returncode == 0 and "no problems found" in clean.stdout, clean.stdout + clean.stderr
    label = cv2.imread(str(labels / "01.png"), cv2.IMREAD_UNCHANGED)
    label[0, 0] = 7
    cv2.imwrite(str(labels / "01.png"), label)
    cv2.imwrite(str(labels / "03.png"), np.zeros((32, 31), np.uint8))
    broken = call_tool("check_dataset", "--config", config)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert f"{labels / '01.png'}: mask values [7] outside [0, 7) (ignore_index 255)" in broken.stdout
    assert f"{labels / '03.png'}: mask is 32x31 but its image is 32x32" in broken.stdout
