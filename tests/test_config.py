import os
import re
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
    from framework.config.schema import LOAD_SPEC
    from framework.weights.partial_load import LOAD_KEYS

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


# ----------------------------------------------------------------------------- framework/config/loading.py, unit by unit
# (written against the survivors of `python tests/scripts/mutation.py config.loading`)


@pytest.mark.parametrize("text, parsed", [
    ("a.b=1", ("a.b", 1, False)),
    ("+a.b=[1, 2]", ("a.b", [1, 2], True)),
    (" a = x=y ", ("a", "x=y", False)),  # split at the first '='; the key's spaces dropped
    ("a=", ("a", "", False)),
    ("a=  ", ("a", "", False)),
    ("a=null", ("a", None, False)),
    ("a=[1,", ("a", "[1,", False)),  # not YAML: the text itself
])
def test_an_override_is_a_key_a_yaml_value_and_whether_it_adds(text, parsed):
    from framework.config.loading import parse_override

    assert parse_override(text) == parsed


@pytest.mark.parametrize("text, message", [
    ("seed", "override 'seed' must look like key=value"),
    ("=1", "override '=1' has no key"),
    ("+ =1", "override '+ =1' has no key"),
])
def test_an_override_without_a_key_is_refused(text, message):
    from framework.config.loading import parse_override

    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        parse_override(text)


def test_overrides_reach_list_items_and_add_nested_keys():
    from framework.config.loading import apply_override

    cfg = {"hooks": [{"type": "A"}, {"type": "B"}], "seed": 0, "train": {"max_iters": 10}}
    apply_override(cfg, "hooks.1.type", "C")
    apply_override(cfg, "hooks.0", {"type": "D"})
    apply_override(cfg, "hooks.-1.priority", 5, adds=True)  # from the end, as in Python
    apply_override(cfg, "train.max_iters", 20)
    apply_override(cfg, "train.max_iters", 30, adds=True)  # + on an existing key sets it
    apply_override(cfg, "new.deep.key", 1, adds=True)
    apply_override(cfg, "train.extra", [1], adds=True)
    assert cfg == {"hooks": [{"type": "D"}, {"type": "C", "priority": 5}], "seed": 0, "train": {"max_iters": 30, "extra": [1]},
                   "new": {"deep": {"key": 1}}}


@pytest.mark.parametrize("key, adds, message", [
    ("hooks.2", False, "override 'hooks.2': hooks.2 is not an index of a list of 2"),
    ("hooks.-3", False, "override 'hooks.-3': hooks.-3 is not an index of a list of 2"),
    ("hooks.type", False, "override 'hooks.type': hooks.type is not an index of a list of 2"),
    ("seed.x", False, "override 'seed.x': seed is a value, not a section"),
    ("train.max_iter", False, "override 'train.max_iter': no key 'train.max_iter' in the config; did you mean "
                              "'max_iters'? (use +train.max_iter=... to add a new key)"),
    ("trian.max_iters", False, "override 'trian.max_iters': no key 'trian' in the config; did you mean 'train'? "
                               "(use +trian.max_iters=... to add a new key)"),
    ("train.max_iters.x", True, "override 'train.max_iters.x': train.max_iters is a value, not a section"),
])
def test_an_override_of_a_missing_key_or_index_is_refused_naming_it(key, adds, message):
    from framework.config.loading import apply_override

    cfg = {"hooks": [{"type": "A"}, {"type": "B"}], "seed": 0, "train": {"max_iters": 10}}
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        apply_override(cfg, key, 1, adds=adds)
    assert cfg == {"hooks": [{"type": "A"}, {"type": "B"}], "seed": 0, "train": {"max_iters": 10}}


def test_the_last_list_index_and_the_first_are_indices():
    from framework.config.loading import apply_override

    cfg = {"hooks": ["a", "b"]}
    apply_override(cfg, "hooks.0", "x")
    apply_override(cfg, "hooks.1", "y")
    assert cfg == {"hooks": ["x", "y"]}


def test_every_cross_key_mistake_is_one_line_naming_the_file(configs):
    _, child = configs
    with pytest.raises(ConfigError) as err:
        load_config(child, ["train.max_iters=null", "optimizers={main: {type: SGD, lr: 0.1}}"])
    assert str(err.value).splitlines() == [
        f"{child}: train.max_iters: missing (set train.max_iters or train.max_epochs)",
        f"{child}: optim/optimizers: give either 'optim' (one optimizer) or 'optimizers' (by name), not both"]
    with pytest.raises(ConfigError, match=f"^{re.escape(str(child))}: train.max_iters \\(100\\) and train.max_epochs "
                                          "\\(3\\) are both set: give one \\(null the other\\)$"):
        load_config(child, ["train.max_epochs=3"])
    cfg = load_config(child, ["train.max_iters=null", "train.max_epochs=3", "optim=null",
                              "optimizers={main: {type: SGD, lr: 0.1}}"])
    assert cfg.train.max_epochs == 3 and cfg.optim is None and cfg.optimizers.main.lr == 0.1


def test_load_from_as_a_mapping_is_checked(configs):
    _, child = configs
    cfg = load_config(child, ["load_from={checkpoint: x.pth, min_loaded_ratio: 1}"])
    assert cfg.load_from.checkpoint == "x.pth" and cfg.load_from.min_loaded_ratio == 1
    with pytest.raises(ConfigError) as err:
        load_config(child, ["load_from={checkpont: x.pth}"])
    assert str(err.value).splitlines() == [f"{child}: load_from.checkpoint: missing (required)",
                                           f"{child}: unknown key 'load_from.checkpont'; did you mean 'checkpoint'?"]


def test_an_interpolation_error_is_one_line_naming_the_file(configs):
    tmp, _ = configs
    bad = write(tmp / "bad_interpolation.yaml", "_base_: [child.yaml]\nseed: ${nope}\n")
    with pytest.raises(ConfigError, match=f"^{re.escape(str(bad))}: Interpolation key 'nope' not found$"):
        load_config(bad)


def test_the_loaded_config_holds_plain_values_only_and_reports_replaced_nodes(configs):
    tmp, _ = configs
    path = write(tmp / "deeplab.yaml", "_base_: [child.yaml]\ntask: {model: {type: DeepLabV3, num_classes: 4}}\n")
    notes = []
    cfg = load_config(path, notes=notes)
    assert notes == ["task.model: type UNet -> DeepLabV3 replaces the base's node; dropped its keys depth, norm "
                     "(set them again if still wanted)"]
    with pytest.raises(Exception, match="object"):  # omegaconf's UnsupportedValueType: no arbitrary objects
        cfg.seed = object()


def test_save_config_resolves_and_writes_atomically(tmp_path):
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"a": 2, "b": "${a}", "name": "café"})
    save_config(cfg, tmp_path / "out" / "config.yaml")
    assert (tmp_path / "out/config.yaml").read_bytes().decode("utf-8") == "a: 2\nb: 2\nname: café\n"
    assert os.listdir(tmp_path / "out") == ["config.yaml"]


def test_the_default_work_dir_is_named_after_the_config():
    from framework.config.loading import default_work_dir

    assert default_work_dir("configs/segmentation/unet_shapes.yaml") == os.path.join("work_dirs", "unet_shapes")


def test_the_plus_sign_is_stripped_and_nothing_else():
    from framework.config.loading import parse_override

    assert parse_override("+XX.a=1") == ("XX.a", 1, True)
    assert parse_override("++a=1") == ("a", 1, True)


def test_an_override_adds_a_key_only_when_asked():
    from framework.config.loading import apply_override

    cfg = {"train": {"max_iters": 10}}
    with pytest.raises(ConfigError, match=re.escape("override 'train.extra': no key 'train.extra' in the config")):
        apply_override(cfg, "train.extra", 1)  # adds defaults to False
    assert cfg == {"train": {"max_iters": 10}}


def test_the_resolved_config_is_exactly_the_defaults_the_files_and_the_overrides(configs):
    import copy

    from omegaconf import OmegaConf

    from framework.config.schema import DEFAULTS

    _, child = configs
    expected = copy.deepcopy(DEFAULTS)
    expected.update(
        seed=7, load_from={"checkpoint": "x.pth", "min_loaded_ratio": 1},
        task={"type": "SegmentationTask", "num_classes": 4,
              "model": {"type": "UNet", "num_classes": 4, "depth": 4, "norm": "bn"}},
        optim={"type": "SGD", "lr": 0.1},
        data={"train": {"batch_size": 2, "dataset": {"type": "SyntheticShapes"}}})
    expected["train"].update(max_iters=10000, log_interval=5)
    cfg = load_config(child, ["load_from={checkpoint: x.pth, min_loaded_ratio: 1}", "train.max_iters=1e4"])
    assert OmegaConf.to_container(cfg) == expected


def test_overriding_a_default_leaves_the_defaults_alone(configs):
    import copy

    from framework.config.schema import DEFAULTS

    _, child = configs
    before = copy.deepcopy(DEFAULTS)
    cfg = load_config(child, ["amp.enabled=true", "dist.timeout=60", "loggers.0=csv"])
    assert cfg.amp.enabled is True and cfg.dist.timeout == 60 and list(cfg.loggers) == ["csv"]
    assert DEFAULTS == before
    cfg = load_config(child)
    assert cfg.amp.enabled == "auto" and cfg.dist.timeout == 1800 and list(cfg.loggers) == ["tensorboard"]


def test_a_train_section_that_is_not_a_mapping_is_reported_not_a_crash(configs):
    _, child = configs
    with pytest.raises(ConfigError) as err:
        load_config(child, ["train=null"])
    assert str(err.value).splitlines() == [
        f"{child}: train: expected a mapping, got None",
        f"{child}: train.max_iters: missing (set train.max_iters or train.max_epochs)"]


def test_save_config_makes_missing_folders_and_overwrites(tmp_path):
    from omegaconf import OmegaConf

    target = tmp_path / "a" / "b" / "config.yaml"  # two missing levels
    save_config(OmegaConf.create({"a": 1}), target)
    save_config(OmegaConf.create({"a": 2}), target)  # the folder exists now
    assert target.read_text() == "a: 2\n"
    assert os.listdir(target.parent) == ["config.yaml"]


def test_save_config_writes_utf8_whatever_the_locale(tmp_path, monkeypatch):
    import io

    from omegaconf import OmegaConf

    # a latin-1 locale, as far as open() without an encoding is concerned (pathlib asks io.text_encoding)
    real = io.text_encoding
    monkeypatch.setattr(io, "text_encoding", lambda encoding, *a: "latin-1" if encoding is None else real(encoding))
    save_config(OmegaConf.create({"name": "café"}), tmp_path / "config.yaml")
    assert (tmp_path / "config.yaml").read_bytes() == b"name: caf\xc3\xa9\n"  # é in UTF-8
