import pytest
import torch
from omegaconf import OmegaConf

import framework  # noqa: F401  (fills the registries)
from framework.errors import ConfigError, DataError
from framework.registry import (
    _ALL_REGISTRIES,
    MODELS,
    OPTIMIZERS,
    SCHEDULERS,
    TRANSFORMS,
    Registry,
    reject_unknown_keys,
)


@pytest.fixture
def fresh_registries():
    """Registry(name) for a test, taken out of the global list afterwards (nested nodes look
    their type up in every registry: a leftover toy would make names ambiguous)."""
    made = []

    def make(name):
        made.append(Registry(name))
        return made[-1]

    yield make
    for registry in made:
        _ALL_REGISTRIES.remove(registry)


@pytest.fixture
def toys(fresh_registries):
    reg = fresh_registries("toys")

    @reg.register()
    class Wheel:
        def __init__(self, size: int = 1):
            self.size = size

    @reg.register("Kart")
    class Car:
        def __init__(self, wheel, wheels=(), colour="red"):
            self.wheel, self.wheels, self.colour = wheel, wheels, colour

    return reg


def test_register_and_build_recursively(toys):
    car = toys.build({"type": "Kart", "wheel": {"type": "Wheel", "size": 3},
                      "wheels": [{"type": "Wheel"}, {"type": "Wheel", "size": 2}]})
    assert car.colour == "red" and car.wheel.size == 3
    assert [w.size for w in car.wheels] == [1, 2]


def test_nested_node_from_another_registry_is_built(toys):
    car = toys.build({"type": "Kart", "wheel": {"type": "UNet", "num_classes": 3, "depth": 2}})
    assert isinstance(car.wheel, torch.nn.Module)


def test_duplicate_name_is_an_error(toys):
    with pytest.raises(KeyError, match="already registered"):
        toys.register("Wheel")(type("Other", (), {}))


def test_unknown_type_names_path_registry_and_close_match(toys):
    with pytest.raises(ConfigError) as err:
        toys.build({"type": "Whel"}, path="model.network")
    message = str(err.value)
    assert "model.network.type" in message and "toys" in message and "'Wheel'" in message


def test_unknown_nested_type_names_its_path(toys):
    with pytest.raises(ConfigError, match=r"model\.wheel\.type: unknown type 'Wheeel'; did you mean 'Wheel'"):
        toys.build({"type": "Kart", "wheel": {"type": "Wheeel"}}, path="model")


def test_bad_keyword_names_class_key_and_accepted(toys):
    with pytest.raises(ConfigError) as err:
        toys.build({"type": "Wheel", "sise": 2}, path="model")
    message = str(err.value)
    assert "model.sise" in message and "Wheel" in message and "'size'" in message and "accepts: size" in message


def test_torch_optimizers_and_schedulers_by_name():
    assert {"SGD", "Adam", "AdamW", "RMSprop"} <= set(OPTIMIZERS.names())
    assert {"StepLR", "CosineAnnealingLR", "OneCycleLR", "WarmupPolyLR"} <= set(SCHEDULERS.names())
    params = [torch.nn.Parameter(torch.zeros(2))]
    opt = OPTIMIZERS.build({"type": "SGD", "lr": 0.1, "momentum": 0.9}, params=params)
    assert isinstance(opt, torch.optim.SGD) and opt.param_groups[0]["momentum"] == 0.9


def test_albumentations_transforms_by_name():
    import albumentations as A

    assert {"HorizontalFlip", "RandomCrop", "Normalize", "OneOf"} <= set(TRANSFORMS.names())
    assert isinstance(TRANSFORMS.build({"type": "HorizontalFlip", "p": 1.0}), A.HorizontalFlip)


def test_user_module_registers_with_decorator():
    @MODELS.register("TinyTestNet")
    class TinyTestNet(torch.nn.Module):
        def __init__(self, width: int = 4):
            super().__init__()
            self.fc = torch.nn.Linear(width, 1)

    try:
        assert MODELS.build({"type": "TinyTestNet", "width": 8}).fc.in_features == 8
    finally:
        MODELS._entries.pop("TinyTestNet")


def test_unknown_type_messages_name_the_path_and_only_real_hints(toys):
    with pytest.raises(ConfigError, match=r"^toys\.type: unknown type 'Zzz' in the toys registry$"):
        toys.build({"type": "Zzz"})  # no path: the registry's name; no look-alike, no hint
    with pytest.raises(ConfigError, match=r"^unknown type 'Zzz' in the toys registry$"):
        toys.get("Zzz")
    with pytest.raises(ConfigError, match=r"^model\.type: unknown type 'UNet' in the toys registry; 'UNet' is in "
                                          r"the models registry, not here$"):
        toys.build({"type": "UNet"}, path="model")


def test_close_matches_are_the_three_best_case_insensitive(fresh_registries):
    parts = fresh_registries("parts")
    for name in ("Wheel", "Wheels", "WHEELIE", "Wheelbase", "Gear"):
        parts.add(type(name, (), {}), name)
    with pytest.raises(ConfigError, match=r"^parts\.type: unknown type 'wheelx' in the parts registry; did you mean "
                                          r"'Wheel', 'Wheels', 'WHEELIE'\?$"):
        parts.build({"type": "wheelx"})


def test_node_shape_errors_are_one_line(toys):
    with pytest.raises(ConfigError, match=r"^model: expected a mapping with a 'type' key, got \{'size': 2\}$"):
        toys.build({"size": 2}, path="model")
    with pytest.raises(ConfigError, match=r"^model\.type: expected a component name, got 3$"):
        toys.build({"type": 3}, path="model")
    with pytest.raises(ConfigError, match=r"^model\.wheels\[1\]\.type: unknown type 'Wheeel'; did you mean "
                                          r"'Wheel'\?$"):
        toys.build({"type": "Kart", "wheel": None, "wheels": [{"type": "Wheel"}, {"type": "Wheeel"}]}, path="model")
    with pytest.raises(ConfigError, match=r"^model\.wheel\.depht: UNet has no parameter 'depht'; did you mean "
                                          r"'depth'\? \(it accepts: in_channels, num_classes, base_channels, depth, "):
        toys.build({"type": "Kart", "wheel": {"type": "UNet", "depht": 2}}, path="model")  # path reaches other registries


def test_keywords_are_checked_unless_the_factory_takes_any(fresh_registries):
    things = fresh_registries("things")
    things.add(lambda: "none", "Nothing")
    things.add(lambda **settings: settings, "Anything")
    with pytest.raises(ConfigError, match=r"^x\.size: Nothing has no parameter 'size' \(it accepts: no parameters\)$"):
        things.build({"type": "Nothing", "size": 1}, path="x")
    assert things.build({"type": "Anything", "size": 1, "colour": {"type": "Nothing"}}) == {"size": 1, "colour": "none"}
    things.add(dict, "Dict")  # a builtin without a signature: its keywords cannot be checked, so any is taken
    assert things.build({"type": "Dict", "size": 1}) == {"size": 1}


def test_constructor_errors_are_named_by_the_node_and_keep_their_kind(fresh_registries):
    things = fresh_registries("things")

    def folder(root):
        raise DataError(f"data folder not found: {root}")

    def already_named(root):
        raise DataError(f"data.train.dataset: {root} is empty")

    def ranged(size):
        raise ValueError(f"size must be positive, got {size}")

    for factory, name in ((folder, "Folder"), (already_named, "Named"), (ranged, "Ranged")):
        things.add(factory, name)
    with pytest.raises(DataError, match=r"^data\.train\.dataset \(Folder\): data folder not found: /x$"):
        things.build({"type": "Folder", "root": "/x"}, path="data.train.dataset")
    with pytest.raises(DataError, match=r"^data\.train\.dataset: /x is empty$"):  # not named twice
        things.build({"type": "Named", "root": "/x"}, path="data.train.dataset")
    with pytest.raises(ConfigError, match=r"^loss \(Ranged\): size must be positive, got -1$"):
        things.build({"type": "Ranged", "size": -1}, path="loss")


def test_a_type_in_two_other_registries_is_ambiguous(fresh_registries):
    first, second, holder = fresh_registries("first"), fresh_registries("second"), fresh_registries("holder")
    first.add(lambda: 1, "Gear")
    second.add(lambda: 2, "Gear")
    holder.add(lambda part: part, "Box")
    with pytest.raises(ConfigError, match=r"^box\.part\.type: 'Gear' is ambiguous, it is in the first, second "
                                          r"registries$"):
        holder.build({"type": "Box", "part": {"type": "Gear"}}, path="box")
    holder.add(lambda: 3, "Gear")  # its own registry first
    assert holder.build({"type": "Box", "part": {"type": "Gear"}}) == 3


def test_allowed_extra_keys_reach_their_receiver_unless_the_component_takes_them(fresh_registries):
    nets = fresh_registries("nets")
    received = []
    nets.allow_keys(("init", "frozen"), lambda component, settings, path: received.append((component, settings, path)))
    nets.add(lambda width=1: {"width": width}, "Plain")
    nets.add(lambda width=1, init=None: {"width": width, "init": init}, "OwnInit")
    plain = nets.build({"type": "Plain", "width": 2, "init": "a.pth", "frozen": True}, path="task.model")
    assert plain == {"width": 2} and received == [(plain, {"init": "a.pth", "frozen": True}, "task.model")]
    received.clear()
    own = nets.build({"type": "OwnInit", "init": "b.pth", "frozen": False}, path="m")
    assert own == {"width": 1, "init": "b.pth"} and received == [(own, {"frozen": False}, "m")]
    received.clear()
    nets.build({"type": "Plain"})
    assert received == []  # nothing to receive: not called


def test_omegaconf_nodes_are_built_with_interpolations_resolved(toys):
    cfg = OmegaConf.create({"size": 5, "node": {"type": "Wheel", "size": "${size}"}})
    assert toys.build(cfg.node).size == 5


def test_sources_fill_a_registry_on_its_first_lookup(fresh_registries):
    lazy = fresh_registries("lazy")
    runs = []

    def loader():
        runs.append(1)
        lazy.add(lambda: "built", "Late")

    lazy.add_source(loader)
    assert runs == []
    assert "Late" in lazy and lazy.build({"type": "Late"}) == "built" and runs == [1]
    assert lazy.names() == ["Late"] and len(lazy) == 1 and runs == [1]  # once


def test_unknown_keys_are_named_with_the_allowed_ones():
    with pytest.raises(ConfigError, match=r"^train\.colour: unknown key; did you mean 'color'\? "
                                          r"\(allowed: max_iters, color\)$"):
        reject_unknown_keys({"max_iters": 1, "colour": 2}, ["max_iters", "color"], "train")
    with pytest.raises(ConfigError, match=r"^train\.zzz: unknown key \(allowed: max_iters\)$"):
        reject_unknown_keys({"zzz": 1}, ["max_iters"], "train")
    reject_unknown_keys({"max_iters": 1}, ["max_iters"], "train")
