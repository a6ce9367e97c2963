"""Every range and choice of the config schema, tried at its boundary.

The test walks SCHEMA (framework/config/schema.py) and asks each rule for its boundary
(`Rule.inside` / `Rule.outside`, framework/config/rules.py): a value just inside must pass,
a value just outside must give exactly one error line naming the key. A new ranged or choice
key is covered here without a new test.
"""

import copy
import math

import pytest

from framework.config.loading import check_config
from framework.config.rules import Rule, any_of, each, integer, list_of, number, one_of, optional, section, shown
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
    cfg["amp"]["enabled"] = True if path == ("amp", "dtype") else cfg["amp"]["enabled"]  # auto refuses float16
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


# The rule constructors, called in the tests (and not only through SCHEMA, built once at import):
# what each says it expects (an error line shows it), its boundary, what it accepts and converts.

def rule_summary(rule):
    return rule.expects, rule.inside, rule.outside


def test_integer_states_its_range_converts_integral_floats_and_refuses_booleans():
    assert rule_summary(integer(1)) == ("an integer >= 1", (1,), (0,))
    assert rule_summary(integer(0, max=5)) == ("an integer >= 0 and <= 5", (0, 5), (-1, 6))
    bounded = integer(0, max=5)
    assert [bounded.accepts(v) for v in (0, 5, -1, 6, True, 2.0, 2.5, "1")] == [True, True, False, False, False,
                                                                                 True, False, False]
    errors = []
    kept = integer(1)(1e4, "train.max_iters", errors)
    assert kept == 10000 and type(kept) is int and errors == []
    assert integer(1)(0, "train.accumulate", errors) == 0
    assert errors == ["train.accumulate: expected an integer >= 1, got 0"]


def test_number_states_each_bound_and_its_boundary():
    assert rule_summary(number()) == ("a number", (), ())
    assert rule_summary(number(finite=True)) == ("a finite number", (), (math.inf,))
    assert rule_summary(number(min=-2.5)) == ("a number >= -2.5", (-2.5,), (-2.5000000000000004,))
    assert rule_summary(number(min=0, max=1)) == ("a number >= 0 and <= 1", (0, 1), (-5e-324, 1.0000000000000002))
    assert rule_summary(number(above=0, finite=True)) == ("a finite number > 0", (5e-324,), (0, math.inf))
    assert rule_summary(number(min=0, above=-1, max=1, finite=True)) == (
        "a finite number >= 0 and > -1 and <= 1", (0, 1, -0.9999999999999999), (-5e-324, -1, 1.0000000000000002))


@pytest.mark.parametrize("rule, accepted, refused", [
    (number(), [0, -1e300, 2.5, math.inf, -math.inf], [math.nan, True, "1", None]),
    (number(finite=True), [1e308, -1e308], [math.inf, -math.inf, math.nan]),
    (number(min=0), [0, 5e-324, math.inf], [-5e-324, -math.inf]),
    (number(above=0), [5e-324, math.inf], [0, -1]),
    (number(max=1), [1, -math.inf], [1.0000000000000002, math.inf]),
], ids=["unbounded", "finite", "min", "above", "max"])
def test_number_accepts_exactly_its_range(rule, accepted, refused):
    assert [v for v in accepted if not rule.accepts(v)] == []
    assert [v for v in refused if rule.accepts(v)] == []
    errors = []
    assert rule(0.5, "dist.timeout", errors) == 0.5 and errors == []


def test_one_of_compares_strings_by_value_and_booleans_and_null_by_identity():
    assert rule_summary(one_of("max", "min")) == ("'max' or 'min'", ("max", "min"), ("max_", "min_"))
    choice = one_of(True, False, "auto", None)
    assert rule_summary(choice) == ("true or false or 'auto' or none", (True, False, "auto", None), ("auto_",))
    auto = "".join(["au", "to"])  # equal to "auto", not the same object
    assert [choice.accepts(v) for v in (True, False, None, auto, 1, 0, "Auto", "auto_")] == [
        True, True, True, True, False, False, False, False]
    assert [one_of(1).accepts(v) for v in (1, 1.0, True, 5)] == [True, True, False, False]
    errors = []
    assert one_of("max", "min")("maxi", "train.best_mode", errors) == "maxi"
    assert errors == ["train.best_mode: expected 'max' or 'min', got 'maxi'"]


def test_any_of_joins_its_rules_and_leaves_out_a_near_miss_another_accepts():
    workers = any_of(integer(0), one_of("auto"))
    assert rule_summary(workers) == ("an integer >= 0 or 'auto'", (0, "auto"), (-1, "auto_"))
    assert [workers.accepts(v) for v in (0, 2.0, "auto", -1, "auto_")] == [True, True, True, False, False]
    assert rule_summary(any_of(integer(0), integer(-5))) == ("an integer >= 0 or an integer >= -5", (0, -5), (-6,))


def test_optional_list_of_and_each_check_every_item_under_its_key():
    errors = []
    maybe = optional(integer(0))
    assert (maybe.expects, maybe.inner.expects) == ("an integer >= 0 or null", "an integer >= 0")
    assert maybe(None, "train.max_iters", errors) is None and errors == []
    assert type(maybe(2.0, "train.max_iters", errors)) is int and errors == []
    assert maybe(-1, "train.max_iters", errors) == -1
    assert errors == ["train.max_iters: expected an integer >= 0, got -1"]

    items = list_of(integer(0))
    assert (items.expects, items.inner.expects) == ("a list", "an integer >= 0")
    errors = []
    assert items([1.0, -1], "hooks", errors) == [1, -1] and type(items([1.0], "hooks", [])[0]) is int
    assert items(3, "hooks", errors) == 3
    assert errors == ["hooks[1]: expected an integer >= 0, got -1", "hooks: expected a list, got 3"]

    named = each(integer(0))
    assert (named.expects, named.inner.expects) == ("a mapping", "an integer >= 0")
    errors = []
    assert named({"a": 1.0, "b": -1}, "optimizers", errors) == {"a": 1, "b": -1}
    assert named({"c": -2}, "", errors) == {"c": -2}
    assert named(3, "optimizers", errors) == 3
    assert errors == ["optimizers.b: expected an integer >= 0, got -1", "c: expected an integer >= 0, got -2",
                      "optimizers: expected a mapping of names to an integer >= 0, got 3"]


def test_section_reports_missing_unknown_and_wrong_keys_and_keeps_the_rest():
    loader = section({"batch": integer(1), "cache": optional(integer(0))}, required=("batch",))
    assert (loader.expects, list(loader.fields), loader.required) == ("a mapping", ["batch", "cache"], ("batch",))
    errors = []
    assert loader({"batch": 2.0, "cache": None}, "data.train", errors) == {"batch": 2, "cache": None}
    assert errors == []
    assert loader(3, "data.train", errors) == 3
    assert loader({"cache": 1, "bach": 2}, "data.train", errors) == {"cache": 1, "bach": 2}
    assert loader({"batch": "???", "cachee": 1, "cache": -1}, "", errors) == {"batch": "???", "cachee": 1, "cache": -1}
    assert errors == ["data.train: expected a mapping, got 3",
                      "data.train.batch: missing (required)",
                      "unknown key 'data.train.bach'; did you mean 'batch', 'cache'?",
                      "batch: missing (required)",
                      "unknown top-level key 'cachee'; did you mean 'cache'?",
                      "cache: expected an integer >= 0, got -1"]
    errors = []
    assert section({"a": integer(0)}, open=True)({"a": 1.0, "lr_decay": 3}, "optim", errors) == {"a": 1, "lr_decay": 3}
    assert errors == []


def test_a_long_value_is_cut_to_sixty_characters_in_an_error():
    assert shown("a" * 58) == repr("a" * 58)  # 60 characters with the quotes: whole
    assert shown("a" * 59) == "'" + "a" * 56 + "..."  # 61: cut to 60
    assert shown("a" * 10, limit=8) == "'aaaa..."
    errors = []
    integer(0)(["x"] * 30, "seed", errors)
    assert errors == ["seed: expected an integer >= 0, got " + repr(["x"] * 30)[:57] + "..."]
