"""Shipped configs pin nothing that depends on the machine: the number of loader workers, pinned
memory and persistent workers are `auto` (or left to the loader's defaults), so the same file is
right on a 2-core laptop and a 64-core GPU server."""

from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SHIPPED = sorted([*REPO.glob("configs/**/*.yaml"), *REPO.glob("projects/*/configs/*.yaml")])
MACHINE_DEPENDENT = {"num_workers": {"auto"}, "pin_memory": {"auto"}, "persistent_workers": set()}


def pinned_settings(node, path=""):
    """(key path, value) of every machine-dependent key set to anything but its allowed values."""
    if isinstance(node, dict):
        for key, value in node.items():
            where = f"{path}.{key}" if path else str(key)
            if key in MACHINE_DEPENDENT and value not in MACHINE_DEPENDENT[key]:
                yield where, value
            yield from pinned_settings(value, where)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from pinned_settings(value, f"{path}[{i}]")


def test_there_are_shipped_configs():
    assert len(SHIPPED) >= 10


@pytest.mark.parametrize("config", SHIPPED, ids=lambda p: str(p.relative_to(REPO)))
def test_no_shipped_config_pins_a_machine_dependent_setting(config):
    assert list(pinned_settings(yaml.safe_load(config.read_text()))) == []


def test_a_pinned_worker_count_is_found():
    assert list(pinned_settings({"data": {"train": {"num_workers": 2}, "val": {"persistent_workers": True}}})) == [
        ("data.train.num_workers", 2), ("data.val.persistent_workers", True)]
