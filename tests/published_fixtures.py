"""Configs on the published datasets (Cityscapes, ADE20K, COCO-Stuff, VOC trainaug, pix2pix's
facades, CycleGAN's horse2zebra) pointed at a fixture tree written here, shrunk for a CPU test:
small crops, and the networks of the GAN recipes at a small size and width (the recipe's own sizes
train on a GPU; tests/scripts/recipe_smoke.py runs them as shipped, tests/test_recipe_cards.py
checks the configs' settings and that their networks are the official layouts)."""

from pathlib import Path

import yaml

from framework.data.published.fixture_trees import root_overrides, write_fixture_tree

LAYOUT_OF = {"Cityscapes": "cityscapes", "ADE20K": "ade20k", "COCOStuff": "cocostuff", "AlignedPairs": "facades",
             "UnpairedImageFolders": "horse2zebra"}
SYNTHESIS_SIZE = {"Cityscapes": (128, 256), "ADE20K": (128, 128)}  # a two-scale PatchGAN needs >= 95 pixels
SEGMENTER_D_SIZE = {"Cityscapes": (64, 128), "ADE20K": (64, 64)}  # OASIS's D halves 6 times: 64 pixels do
IMAGE_TO_IMAGE = ("AlignedPairs", "UnpairedImageFolders")  # 32x32 crops, generators and critics 8 wide
# The VGG loss of the recipes with random weights (no file) and its first block only: the same code
# path at a fraction of a VGG19's time.
INCEPTION_METRICS = ("FID", "KID")
CHEAP_VGG = ["task.perceptual.weights=random", "task.perceptual.layers={relu1_1: 1.0}"]


def without_inception_metrics(plain: dict) -> list[str]:
    """Overrides dropping the metrics that read a local Inception weights file (FID, KID: the OASIS
    recipes' best checkpoint), which a test machine does not have, and a best_metric among them;
    [] for a config without them. tests/test_gan_recipe_behaviour.py checks their refusal."""
    metrics = plain.get("metrics") or []
    kept = [node for node in metrics if node.get("type") not in INCEPTION_METRICS]
    if len(kept) == len(metrics):
        return []
    overrides = ["metrics=" + yaml.safe_dump(kept, default_flow_style=True, width=1000).strip()]
    if plain["train"].get("best_metric") in INCEPTION_METRICS:
        overrides.append("train.best_metric=null")
    return overrides


def reads_published_data(plain: dict) -> bool:
    dataset = plain["data"]["train"]["dataset"]
    return dataset["type"] in LAYOUT_OF or dataset.get("split") == "trainaug"


def published_overrides(plain: dict, tmp: Path, samples: int = 3) -> list[str]:
    """Overrides pointing a config on a published dataset at a fixture tree of `samples` per split
    (two processes of batch 2 need 4), shrunk; [] for others."""
    dataset = plain["data"]["train"]["dataset"]
    if not reads_published_data(plain):
        return []
    layout = LAYOUT_OF.get(dataset["type"], "voc_sbd")
    overrides = root_overrides(layout, write_fixture_tree(layout, tmp / "fixture", samples))
    overrides += without_inception_metrics(plain)
    task = plain["task"]
    if task.get("perceptual"):
        overrides += CHEAP_VGG
    if dataset["type"] in IMAGE_TO_IMAGE:
        return overrides + image_to_image_overrides(task)
    if task["type"] == "SemanticSynthesisTask":
        height, width = synthesis_size(plain)
        resize = f"[{{type: Resize, height: {height}, width: {width}}}]"
        overrides += [f"data.train.dataset.pipeline={resize}", f"data.val.dataset.pipeline={resize}"]
        if task["discriminator"]["type"] == "OASISDiscriminator":  # its residual U-Net, 8 to 32 wide
            overrides += ["+task.discriminator.widths=[8,8,16,16,32,32]", "+task.discriminator.last_width=8"]
        else:
            overrides.append("task.discriminator.base_channels=8")
        if task["generator"]["type"] == "LabelMapGenerator":  # pix2pixHD's: any size a multiple of 16
            return overrides + ["task.generator.network.base_channels=8", "task.generator.network.num_blocks=2"]
        overrides += [f"task.generator.image_size=[{height},{width}]", "task.generator.base_channels=8",
                      "task.generator.spade_hidden=8"]
    else:
        overrides += ["data.train.dataset.pipeline=[{type: SmallestMaxSize, max_size: 32}, "
                      "{type: RandomCrop, height: 32, width: 32}]",
                      "data.val.dataset.pipeline=[{type: SmallestMaxSize, max_size: 32}]"]
    return overrides


def image_to_image_overrides(task: dict) -> list[str]:
    """pix2pix (facades) and CycleGAN (horse2zebra) at 32x32: the U-Net 5 levels deep instead of 8,
    the ResNet generators with 2 blocks, every network 8 channels wide."""
    resize = "{type: Resize, height: 32, width: 32}"
    overrides = [f"data.train.dataset.pipeline=[{resize}, {{type: HorizontalFlip, p: 0.5}}]",
                 f"data.val.dataset.pipeline=[{resize}]"]
    for name, node in task.items():
        if not (isinstance(node, dict) and "type" in node and "base_channels" in node):
            continue
        overrides.append(f"task.{name}.base_channels=8")
        if node["type"] == "UNetGenerator":
            overrides.append(f"task.{name}.num_downs=5")
        if node["type"] == "ResnetGenerator":
            overrides.append(f"task.{name}.num_blocks=2")
    return overrides


def sample_size(plain: dict, default: tuple[int, int]) -> tuple[int, int]:
    """(height, width) of a shrunk synthesis config's samples (a two-scale PatchGAN of 4 layers needs
    95 pixels a side; browse_dataset's grid is made of them); `default` for other configs."""
    dataset = plain["data"]["train"]["dataset"]
    if plain["task"]["type"] != "SemanticSynthesisTask" or dataset["type"] not in SYNTHESIS_SIZE:
        return default
    return synthesis_size(plain)


def synthesis_size(plain: dict) -> tuple[int, int]:
    """A PatchGAN needs 95 pixels a side; OASIS's segmenter D (and the generator) do with 64."""
    table = SEGMENTER_D_SIZE if plain["task"]["discriminator"]["type"] == "OASISDiscriminator" else SYNTHESIS_SIZE
    return table[plain["data"]["train"]["dataset"]["type"]]
