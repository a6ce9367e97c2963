"""Recipe cards (docs/recipes/<config>.yaml): each lists the settings of a recipe config that the
paper's run fixes, with their sources. Each recipe config resolves (as tools/print_config.py
resolves it: bases merged, interpolations resolved, defaults filled in) to every value its card
states, a card key missing from the config fails, and the networks a card names are the official
layouts of tests/data/fingerprints/ (parameter count and shape multiset, built on the meta device).
The two-iteration runs of the recipes on fixture trees are in tests/test_published_configs.py."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml
from test_fingerprints import built_on_meta, fingerprint, shape_multiset

from framework.config import load_config, to_plain
from framework.config.custom_imports import import_custom_modules
from support import REPO

CARDS = sorted((REPO / "docs" / "recipes").glob("*.yaml"))
CARD_KEYS = {"recipe", "config", "paper", "official", "fingerprints", "settings", "iterations", "published",
             "compute", "deviations"}
RECIPE_CONFIGS = ["configs/synthesis/spade_cityscapes.yaml", "configs/synthesis/spade_ade20k.yaml",
                  "configs/synthesis/oasis_cityscapes.yaml", "configs/synthesis/oasis_ade20k.yaml",
                  "projects/pix2pix/configs/pix2pixhd_cityscapes.yaml", "projects/cyclegan/configs/cyclegan_horse2zebra.yaml",
                  "projects/pix2pix/configs/pix2pix_facades.yaml", "configs/segmentation/deeplabv3plus_r50_cityscapes.yaml"]


def read_card(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def resolved(config: str | Path, overrides: list[str] = ()) -> dict:
    """The config as tools/print_config.py prints it (load_config resolves and fills defaults)."""
    return to_plain(load_config(str(REPO / config), list(overrides)))


def lookup(plain: dict, dotted: str):
    """The value at `dotted` (a.b.c) in a resolved config; KeyError naming the first missing part."""
    value = plain
    for depth, part in enumerate(dotted.split(".")):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(".".join(dotted.split(".")[:depth + 1]))
        value = value[part]
    return value


def mismatches(card: dict, plain: dict) -> list[str]:
    """One line per card setting the resolved config does not hold as stated."""
    found = []
    for key, setting in card["settings"].items():
        try:
            value = lookup(plain, key)
        except KeyError as missing:
            found.append(f"{card['config']}: {key}: the card's key is missing from the config (no {missing.args[0]})")
            continue
        if value != setting["value"]:
            found.append(f"{card['config']}: {key}: the config has {value!r}, the card {setting['value']!r}")
    return found


@pytest.fixture(scope="module", params=CARDS, ids=lambda path: path.stem)
def card(request) -> dict:
    return read_card(request.param)


def test_every_recipe_has_a_card_named_after_its_config():
    assert sorted(read_card(path)["config"] for path in CARDS) == sorted(RECIPE_CONFIGS)
    for path in CARDS:
        assert Path(read_card(path)["config"]).stem == path.stem


def test_card_states_every_part_with_a_source_for_each_setting(card):
    assert set(card) == CARD_KEYS, f"{card['config']}: card keys {sorted(set(card) ^ CARD_KEYS)}"
    for key, setting in card["settings"].items():
        assert set(setting) == {"value", "source"} and setting["source"], f"{card['config']}: {key}"
    for deviation in card["deviations"]:
        assert set(deviation) == {"setting", "official", "here", "why"} and all(deviation.values()), deviation


def test_recipe_config_resolves_to_its_card(card):
    assert mismatches(card, resolved(card["config"])) == []


def test_a_changed_or_missing_setting_fails_the_comparison():
    card = read_card(REPO / "docs/recipes/oasis_ade20k.yaml")
    changed = resolved(card["config"], ["task.labelmix_weight=9.0", "optimizers.generator.betas=[0.5,0.999]"])
    assert mismatches(card, changed) == [
        f"{card['config']}: task.labelmix_weight: the config has 9.0, the card 10.0",
        f"{card['config']}: optimizers.generator.betas: the config has [0.5, 0.999], the card [0.0, 0.999]"]
    card["settings"]["task.discriminator.widths"] = {"value": [128], "source": "a key the config lacks"}
    assert mismatches(card, resolved(card["config"]))[-1] == (
        f"{card['config']}: task.discriminator.widths: the card's key is missing from the config "
        f"(no task.discriminator.widths)")


def test_recipe_networks_are_the_official_layouts(card, monkeypatch):
    # Spectral norm's power iteration takes seconds a layer on the meta device, and the
    # parametrisation changes no parameter's shape (the weight becomes `original`, u and v are
    # buffers): built without it here; tests/test_fingerprints.py builds the layouts with it.
    monkeypatch.setattr("torch.nn.utils.parametrizations.spectral_norm", lambda module, **_: module)
    plain = resolved(card["config"])
    import_custom_modules(load_config(str(REPO / card["config"])))
    for key, name in card["fingerprints"].items():
        node = dict(lookup(plain, key))
        network = built_on_meta(node)
        expected = fingerprint(name)
        count = sum(p.numel() for p in network.parameters())
        assert count == expected["parameters"], f"{card['config']}: {key} has {count:,} parameters, {name} " \
                                                f"{expected['parameters']:,}"
        assert shape_multiset(network) == Counter(expected["shapes"]), f"{card['config']}: {key} vs {name}"


def test_recipe_configs_and_docs_link_their_cards(card):
    stem = Path(card["config"]).stem
    assert f"docs/recipes/{stem}.yaml" in (REPO / card["config"]).read_text(), f"{card['config']}: header link"
    assert f"recipes/{stem}.yaml" in (REPO / "docs/recipes.md").read_text(), f"docs/recipes.md lacks {stem}"
