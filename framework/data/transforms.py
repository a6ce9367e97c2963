"""Albumentations transforms in the TRANSFORMS registry, and the pipeline that chains them.

Every albumentations transform and composition is registered under its class name, so a
config writes them as nodes with albumentations' own keywords:

    pipeline:
      - {type: RandomCrop, height: 48, width: 48}
      - {type: OneOf, transforms: [{type: HorizontalFlip}, {type: VerticalFlip}], p: 0.8}

One exception: `Resize` is the project's subclass (framework/data/resize.py), which resizes as PIL
does (filtered on downscale, label maps on PIL NEAREST's grid) unless `antialias: false`.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from framework.errors import ConfigError
from framework.registry import TRANSFORMS, is_node

if TYPE_CHECKING:
    import albumentations as A

# Exported base classes that describe no augmentation of their own.
_ABSTRACT_BASES = {"BasicTransform", "DualTransform", "ImageOnlyTransform", "Transform3D", "BaseCompose"}


def _register_albumentations() -> None:
    from framework.data.resize import A, Resize  # first: albumentations is imported there, without the Hub

    BaseCompose = A.core.composition.BaseCompose
    ToTensorV2 = importlib.import_module("albumentations.pytorch").ToTensorV2

    own = {"Resize": Resize}  # in albumentations' place, with its keywords (framework/data/resize.py)
    for name, obj in vars(A).items():
        if (
            inspect.isclass(obj)
            and issubclass(obj, (A.BasicTransform, BaseCompose))
            and name not in _ABSTRACT_BASES
        ):
            TRANSFORMS.add(own.get(name, obj), name)
    if "ToTensorV2" not in TRANSFORMS:  # not exported at top level by every version
        TRANSFORMS.add(ToTensorV2, "ToTensorV2")


TRANSFORMS.add_source(_register_albumentations)


def build_pipeline(
    transforms: Sequence[Any] = (),
    additional_targets: dict[str, str] | None = None,
    path: str = "pipeline",
) -> A.Compose:
    """One `A.Compose` from built transforms and/or config nodes (built via TRANSFORMS).

    `path` is the config path of the list, so a bad node is reported as e.g.
    `data.train.dataset.pipeline[2].type: unknown type ...`.
    """
    from framework.data.resize import A  # albumentations, imported there without the Hub

    BaseCompose = A.core.composition.BaseCompose
    if isinstance(transforms, str) or not isinstance(transforms, Sequence):
        raise ConfigError(f"{path}: expected a list of transforms, got {transforms!r}")
    built = []
    for i, item in enumerate(transforms):
        item_path = f"{path}[{i}]"
        if is_node(item):
            item = TRANSFORMS.build(item, path=item_path)
        if not isinstance(item, (A.BasicTransform, BaseCompose)):
            raise ConfigError(
                f"{item_path}: expected an albumentations transform or a {{type: ...}} node, got {item!r}"
            )
        built.append(item)
    return A.Compose(built, additional_targets=additional_targets)
