import pytest
import torch

import framework  # noqa: F401  (fills the registries)
from framework.errors import ConfigError
from framework.registry import MODELS, OPTIMIZERS, SCHEDULERS, TRANSFORMS, Registry


@pytest.fixture
def toys():
    reg = Registry("toys")

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
