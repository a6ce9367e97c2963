"""Configs on the published datasets (Cityscapes, ADE20K, COCO-Stuff, VOC trainaug) pointed at a
fixture tree written here, shrunk for a CPU test: small crops, and synthesis networks at a small
size (the recipe's own sizes train on a GPU; tests/test_published_configs.py checks the configs as
shipped otherwise)."""

from pathlib import Path

from framework.data.published.fixture_trees import write_fixture_tree

LAYOUT_OF = {"Cityscapes": "cityscapes", "ADE20K": "ade20k", "COCOStuff": "cocostuff"}
SYNTHESIS_SIZE = {"Cityscapes": (128, 256), "ADE20K": (128, 128)}  # a two-scale PatchGAN needs >= 95 pixels


def reads_published_data(plain: dict) -> bool:
    dataset = plain["data"]["train"]["dataset"]
    return dataset["type"] in LAYOUT_OF or dataset.get("split") == "trainaug"


def published_overrides(plain: dict, tmp: Path, samples: int = 3) -> list[str]:
    """Overrides pointing a config on a published dataset at a fixture tree of `samples` per split
    (two processes of batch 2 need 4), shrunk; [] for others."""
    dataset = plain["data"]["train"]["dataset"]
    if not reads_published_data(plain):
        return []
    if dataset["type"] in LAYOUT_OF:
        overrides = [f"data.train.dataset.root={write_fixture_tree(LAYOUT_OF[dataset['type']], tmp / 'fixture', samples)}"]
    else:
        out = write_fixture_tree("voc_sbd", tmp / "fixture", samples)
        overrides = [f"data.train.dataset.root={out / 'VOCdevkit/VOC2012'}",
                     f"data.train.dataset.sbd_root={out / 'benchmark_RELEASE'}"]
    if plain["task"]["type"] == "SemanticSynthesisTask":
        height, width = SYNTHESIS_SIZE[dataset["type"]]
        resize = f"[{{type: Resize, height: {height}, width: {width}}}]"
        overrides += [f"data.train.dataset.pipeline={resize}", f"data.val.dataset.pipeline={resize}",
                      f"task.generator.image_size=[{height},{width}]", "task.generator.base_channels=16",
                      "task.generator.spade_hidden=16", "task.discriminator.base_channels=16"]
    else:
        overrides += ["data.train.dataset.pipeline=[{type: SmallestMaxSize, max_size: 32}, "
                      "{type: RandomCrop, height: 32, width: 32}]",
                      "data.val.dataset.pipeline=[{type: SmallestMaxSize, max_size: 32}]"]
    return overrides


def sample_size(plain: dict, default: tuple[int, int]) -> tuple[int, int]:
    """(height, width) of a shrunk synthesis config's samples (a two-scale PatchGAN of 4 layers needs
    95 pixels a side; browse_dataset's grid is made of them); `default` for other configs."""
    dataset = plain["data"]["train"]["dataset"]
    if plain["task"]["type"] != "SemanticSynthesisTask" or dataset["type"] not in SYNTHESIS_SIZE:
        return default
    return SYNTHESIS_SIZE[dataset["type"]]
