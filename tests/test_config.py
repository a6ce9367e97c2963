import sys
import textwrap

import pytest
import yaml

from framework.config import import_custom_modules, load_config, save_config
from framework.errors import ConfigError


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def configs(tmp_path):
    write(tmp_path / "_base_/model.yaml", """
        task:
          type: SegmentationTask
          num_classes: 4
          model: {type: UNet, num_classes: "${task.num_classes}", depth: 4, norm: bn}
        """)
    write(tmp_path / "_base_/run.yaml", """
        seed: 1
        optim: {type: SGD, lr: 0.1}
        train: {max_iters: 100, log_interval: 10}
        data: {train: {batch_size: 2, dataset: {type: SyntheticShapes}}}
        """)
    child = write(tmp_path / "child.yaml", """
        _base_: [_base_/model.yaml, _base_/run.yaml]
        seed: 7
        train: {log_interval: 5}
        """)
    return tmp_path, child


def test_bases_merge_in_order_child_wins_and_interpolation(configs):
    _, child = configs
    cfg = load_config(child)
    assert cfg.seed == 7 and cfg.train.log_interval == 5 and cfg.train.max_iters == 100
    assert cfg.task.model.num_classes == 4 and cfg.task.model.depth == 4
    assert cfg.load_from is None and cfg.custom_imports == []  # public keys get defaults


def test_overrides_parse_yaml_lists_null_and_last_wins(configs):
    _, child = configs
    cfg = load_config(child, ["optim.lr=0.01", "data.train.batch_size=4", "load_from=null",
                              "task.num_classes=6", "optim.lr=0.02", "custom_imports=[a, b]"])
    assert cfg.optim.lr == 0.02 and cfg.data.train.batch_size == 4 and cfg.load_from is None
    assert cfg.task.model.num_classes == 6  # interpolation sees the override
    assert list(cfg.custom_imports) == ["a", "b"]


def test_override_key_that_matches_nothing_suggests(configs):
    _, child = configs
    with pytest.raises(ConfigError, match=r"no key 'optim.lrr'.*did you mean 'lr'"):
        load_config(child, ["optim.lrr=0.1"])


def test_plus_prefix_adds_a_new_key(configs):
    _, child = configs
    assert load_config(child, ["+optim.momentum=0.9"]).optim.momentum == 0.9


def test_unknown_top_level_key_suggests(configs):
    tmp, _ = configs
    bad = write(tmp / "bad.yaml", "_base_: [child.yaml]\noptimm: {type: SGD}\n")
    with pytest.raises(ConfigError, match=r"unknown top-level key 'optimm'; did you mean 'optim'"):
        load_config(bad)


def test_unknown_train_key_suggests(configs):
    _, child = configs
    with pytest.raises(ConfigError, match=r"train.max_iter'; did you mean 'max_iters'"):
        load_config(child, ["+train.max_iter=3"])


def test_missing_config_and_missing_base_name_the_file(configs):
    tmp, _ = configs
    with pytest.raises(ConfigError, match="config file not found: .*nope.yaml"):
        load_config(tmp / "nope.yaml")
    orphan = write(tmp / "orphan.yaml", "_base_: [gone.yaml]\n")
    with pytest.raises(ConfigError, match=r"gone.yaml \(listed in _base_ of .*orphan.yaml\)"):
        load_config(orphan)


def test_changing_type_replaces_the_base_node(configs):
    tmp, _ = configs
    cfg_path = write(tmp / "deeplab.yaml", """
        _base_: [child.yaml]
        task: {model: {type: DeepLabV3, num_classes: 4}}
        """)
    model = load_config(cfg_path).task.model
    assert model.type == "DeepLabV3" and "depth" not in model and "norm" not in model


def test_custom_imports_and_saved_config(configs, monkeypatch):
    tmp, child = configs
    write(tmp / "my_ext.py", "IMPORTED = True\n")
    monkeypatch.syspath_prepend(str(tmp))
    cfg = load_config(child, ["custom_imports=[my_ext]"])
    import_custom_modules(cfg)
    assert sys.modules["my_ext"].IMPORTED
    with pytest.raises(ConfigError, match="custom_imports: cannot import 'not_a_module_xyz'"):
        import_custom_modules(load_config(child, ["custom_imports=[not_a_module_xyz]"]))
    save_config(cfg, tmp / "out/config.yaml")
    saved = yaml.safe_load((tmp / "out/config.yaml").read_text())
    assert saved["task"]["model"]["num_classes"] == 4 and saved["seed"] == 7


def test_exponent_without_a_dot_is_a_float(configs):
    tmp, _ = configs
    path = write(tmp / "exp.yaml", "_base_: [child.yaml]\noptim: {type: SGD, lr: 1e-3}\n")
    assert load_config(path).optim.lr == 0.001  # YAML 1.1 alone would read the string '1e-3'
    assert load_config(path, ["optim.lr=2e-4"]).optim.lr == 0.0002


def test_every_public_key_has_a_rule():
    from framework.config.schema import DEFAULTS, LOADER, SCHEMA
    from framework.data.loader import LOADER_KEYS

    assert set(SCHEMA.fields) == set(DEFAULTS)
    for name, default in DEFAULTS.items():
        if isinstance(default, dict):
            assert set(SCHEMA.fields[name].fields) == set(default), name
    assert set(LOADER.fields) == set(LOADER_KEYS)


def test_load_from_takes_every_key_of_a_load_spec(configs):
    from framework.checkpoint.partial_load import LOAD_KEYS
    from framework.config.schema import LOAD_SPEC

    assert set(LOAD_SPEC.fields) == set(LOAD_KEYS)  # `init:` takes them all, so `load_from:` must too
    _, child = configs
    cfg = load_config(child, ["load_from={checkpoint: x.pth, adapt_in_channels: mean}"])
    assert cfg.load_from.adapt_in_channels == "mean"
    with pytest.raises(ConfigError, match=r"load_from.adapt_in_channels: expected 'zeros' or 'mean', got 'sum'"):
        load_config(child, ["load_from={checkpoint: x.pth, adapt_in_channels: sum}"])


def test_integral_floats_become_integers_and_fractions_are_refused(configs):
    _, child = configs
    assert load_config(child, ["train.max_iters=1e4"]).train.max_iters == 10000
    with pytest.raises(ConfigError, match=r"train.max_iters: expected an integer >= 1, got 2.5"):
        load_config(child, ["train.max_iters=2.5"])
