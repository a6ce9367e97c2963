"""Architecture fingerprints: each official layout, built from its config node on the meta device
(no memory, no time drawing weights), has the official network's parameter count to the parameter
and the same multiset of parameter shapes.

tests/data/fingerprints/<name>.json holds the official shapes, derived once from the official layer
definitions by tests/scripts/derive_fingerprints.py, and the node that builds the layout here.
REFERENCE_COUNTS are the counts the official code prints (issue 50), kept apart from the JSON so
that a re-derivation that drifts fails too. `pytest -k fingerprint` runs this file.
"""

from __future__ import annotations

import importlib.util
import json
import math
from collections import Counter
from pathlib import Path

import pytest
import torch

import projects.pix2pix  # noqa: F401  (registers UNetGenerator, ResnetGenerator, PatchGANDiscriminator)
from framework.registry import MODELS

FINGERPRINTS = Path(__file__).parent / "data" / "fingerprints"
SCRIPTS = Path(__file__).parent / "scripts"

REFERENCE_COUNTS = {
    "cyclegan_resnet_9blocks": 11_378_179,
    "cyclegan_patchgan": 2_764_737,
    "pix2pix_unet_256": 54_413_955,
    "pix2pix_patchgan": 2_768_705,
    "pix2pixhd_global": 182_546_755,
    "deeplabv3_resnet50": 42_004_074,
    "spade_generator_ade20k": 96_492_483,
    "spade_generator_cityscapes": 93_048_003,
    "spade_discriminator_ade20k": 5_836_930,
    "oasis_generator_ade20k": 74_314_691,
    "oasis_generator_cityscapes": 71_107_523,
    "oasis_discriminator_ade20k": 22_258_904,
}


def fingerprint(name: str) -> dict:
    return json.loads((FINGERPRINTS / f"{name}.json").read_text())


def built_on_meta(node: dict) -> torch.nn.Module:
    with torch.device("meta"):
        return MODELS.build(node, path=f"fingerprint {node['type']}")


def shape_multiset(network: torch.nn.Module) -> Counter:
    return Counter("x".join(map(str, p.shape)) for p in network.parameters())


NAMES = sorted(path.stem for path in FINGERPRINTS.glob("*.json"))


def test_fingerprint_files_cover_every_reference_count():
    assert set(REFERENCE_COUNTS) <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_fingerprint_of_the_official_layout(name):
    expected = fingerprint(name)
    network = built_on_meta(expected["node"])
    count = sum(p.numel() for p in network.parameters())
    assert count == expected["parameters"], f"{name}: {count:,} parameters, the official code has " \
                                            f"{expected['parameters']:,}"
    assert shape_multiset(network) == Counter(expected["shapes"])


@pytest.mark.parametrize("name", sorted(REFERENCE_COUNTS))
def test_fingerprint_derivation_gives_the_official_count(name):
    # the JSON's shapes add up to what the official code prints: the derivation itself is right
    expected = fingerprint(name)
    assert sum(math.prod(map(int, key.split("x"))) * n for key, n in expected["shapes"].items()) \
        == expected["parameters"] == REFERENCE_COUNTS[name]


def test_fingerprint_catches_a_changed_layout():
    # the framework's own U-Net default (biased edge convs) is 576 parameters off the official one
    node = dict(fingerprint("pix2pix_unet_256")["node"], edge_bias=True)
    network = built_on_meta(node)
    assert sum(p.numel() for p in network.parameters()) == REFERENCE_COUNTS["pix2pix_unet_256"] + 64 + 512
    assert shape_multiset(network) != Counter(fingerprint("pix2pix_unet_256")["shapes"])


def test_fingerprint_counts_are_the_ones_the_docs_list():
    page = (Path(__file__).parents[1] / "docs" / "models.md").read_text()
    for name in NAMES:
        assert f"| {fingerprint(name)['parameters']:,} |" in page, f"docs/models.md lacks {name}'s count"


def test_fingerprint_files_are_what_the_derivation_writes():
    spec = importlib.util.spec_from_file_location("derive_fingerprints", SCRIPTS / "derive_fingerprints.py")
    derivation = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(derivation)
    written = {path.name: path.read_text() for path in FINGERPRINTS.glob("*.json")}
    assert derivation.rendered() == written, "run python tests/scripts/derive_fingerprints.py and review the diff"
