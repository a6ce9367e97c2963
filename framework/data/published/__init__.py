"""Readers of the published segmentation datasets, each reading the tree as its authors publish it
(no conversion step): Cityscapes, ADE20K (the scene-parsing benchmark), COCO-Stuff 164k and
Pascal VOC (with SBD's extra labels for `trainaug`). Each module keeps the pairing rule, the label
lookup table and the class names and palette of its dataset together; `labels: synthesis` gives
the label convention SPADE and OASIS train on. docs/datasets.md describes each.

Owns: the published layouts, their label tables, class names and palettes, and the fixture-tree
writer (`fixture_trees.py`, tools/make_fixture_dataset.py) that makes small trees in each layout.
May import: errors, registry, visualization (the fixture trees' VOC palette), runtime (the fixture writer's
refusal to write into a folder it did not create).
"""

from framework.data.published.ade20k import ADE20K
from framework.data.published.cityscapes import Cityscapes
from framework.data.published.cocostuff import COCOStuff
from framework.data.published.voc import VOC_CLASSES, VOCSegmentation

__all__ = ["ADE20K", "COCOStuff", "Cityscapes", "VOCSegmentation", "VOC_CLASSES"]
