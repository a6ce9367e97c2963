"""Every range and choice of the config schema, tried at its boundary.

The test walks SCHEMA (framework/config/schema.py) and asks each rule for its boundary
(`Rule.inside` / `Rule.outside`, framework/config/rules.py): a value just inside must pass,
a value just outside must give exactly one error line naming the key. A new ranged or choice
key is covered here without a new test.
"""

import copy

import pytest

from framework.config.loading import check_config
from framework.config.rules import Rule
from framework.config.schema import DEFAULTS, LOAD_SPEC, SCHEMA
from framework.errors import ConfigError
from support import REPO, TINY_UNET, call_tool

OPTIMIZER_NAME = "main"  # the name a walk gives an `each(...)` entry (optimizers.<name>)


def leaf_keys(rule, path=()):
    """(key path, rule) for every leaf rule (a Rule) under `rule`."""
    if isinstance(rule, Rule):
        yield path, rule
    elif hasattr(rule, "fields"):  # section(...)
        for name, field in rule.fields.items():
            yield from leaf_keys(field, (*path, name))
    elif getattr(rule, "expects", "") == "a mapping" and hasattr(rule, "inner"):  # each(...)
        yield from leaf_keys(rule.inner, (*path, OPTIMIZER_NAME))
    elif hasattr(rule, "inner") and not getattr(rule, "expects", "").startswith("a list"):  # optional(...)
        yield from leaf_keys(rule.inner, path)
    # list_of(node): nodes have no range


def full_config(path):
    """A valid config in which every section on `path` exists (a loader in each split, an
    optimizer with clip_grad, load_from as a mapping)."""
    loader = {"dataset": {"type": "SyntheticShapes"}, "batch_size": 2}
    optimizer = {"type": "SGD", "lr": 0.1, "clip_grad": {"max_norm": 1.0}}
    cfg = copy.deepcopy(DEFAULTS)
    cfg.update(task={"type": "SegmentationTask"}, data={"train": loader, "val": dict(loader), "test": dict(loader)},
               optim=optimizer, load_from={"checkpoint": "weights.pth"})
    cfg["train"]["max_iters"] = None if path == ("train", "max_epochs") else 10  # exclusive too
    if path[0] == "optimizers":  # optim and optimizers are exclusive
        cfg["optimizers"], cfg["optim"] = {OPTIMIZER_NAME: cfg.pop("optim")}, None
    return cfg


def with_value(path, value):
    cfg = full_config(path)
    node = cfg
    for name in path[:-1]:
        node = node[name]
    node[path[-1]] = copy.deepcopy(value)
    return cfg


ROOTS = [(SCHEMA, ()), (LOAD_SPEC, ("load_from",))]  # LOAD_SPEC checks load_from when it is a mapping
LEAVES = [(path, rule) for root, prefix in ROOTS for path, rule in leaf_keys(root, prefix)]
KEYS = [(path, rule) for path, rule in LEAVES if rule.outside]
CASES = [pytest.param(path, value, id=f"{'.'.join(path)}={value!r}") for path, rule in KEYS for value in rule.outside]
INSIDE = [pytest.param(path, value, id=f"{'.'.join(path)}={value!r}") for path, rule in KEYS for value in rule.inside]


def test_the_walk_finds_every_kind_of_ranged_key():
    keys = {".".join(path) for path, _ in KEYS}
    assert {"seed", "train.accumulate", "train.nan_policy", "optim.lr", "optim.clip_grad.max_norm",
            "optimizers.main.clip_grad.norm_type", "data.val.cache_limit_mb", "data.train.num_workers",
            "dist.timeout", "amp.dtype", "auto_resume", "load_from.min_loaded_ratio"} <= keys
    assert len(keys) >= 40
    # a number without a range is almost always a forgotten check (clip_grad.max_norm: 0 was accepted)
    unbounded = [".".join(path) for path, rule in LEAVES
                 if rule.expects.startswith(("a number", "an integer")) and not rule.outside]
    assert unbounded == []
    check_config(full_config(("optim",)), "base.yaml")  # the configs below differ from it in one key only
    check_config(full_config(("optimizers",)), "base.yaml")


@pytest.mark.parametrize("path, value", INSIDE)
def test_a_value_at_the_edge_of_the_range_is_accepted(path, value):
    check_config(with_value(path, value), "run.yaml")


@pytest.mark.parametrize("path, value", CASES)
def test_a_value_just_outside_the_range_is_one_error_naming_the_key(path, value):
    key = ".".join(path)
    with pytest.raises(ConfigError) as raised:
        check_config(with_value(path, value), "run.yaml")
    lines = str(raised.value).splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"run.yaml: {key}: expected "), lines[0]
    assert lines[0].endswith(f"got {value!r}"), lines[0]


@pytest.mark.parametrize("max_norm", ["0", "-1.0"])
def test_train_refuses_clip_grad_max_norm_of_zero_or_less(tmp_path, max_norm):
    """clip_grad.max_norm 0 would zero every gradient; a negative one is meaningless."""
    result = call_tool("train", "--config", REPO / "configs/segmentation/unet_shapes.yaml", "--work-dir",
                       tmp_path / "wd", *TINY_UNET, "data.train.num_workers=0", "train.max_iters=1",
                       "train.val_interval=0", f"+optim.clip_grad={{max_norm: {max_norm}}}")  # tiny, if accepted
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith(f"optim.clip_grad.max_norm: expected a number > 0, got {max_norm}")
    assert not (tmp_path / "wd").exists()  # refused before anything is written
