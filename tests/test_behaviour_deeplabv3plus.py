"""Behavioural fingerprints of the DeepLabV3+ recipes (issue 61, item 4): the numbers a training step
depends on that a parameter count cannot see, against MMSegmentation's values in
tests/data/behaviour/deeplabv3plus_mmseg.json (each with its repository and commit): the dilation of
each dilated stage's first blocks, where the built network has dropout and how much, the CE of fixed
logits and labels, the learning rate at iterations 0, 1, mid and last, the effective batch, and the
precision and checkpoint the recipe trains and reports with. Networks are built on the meta device."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path

import pytest
import torch
from test_fingerprints import built_on_meta, fingerprint, shape_multiset
from test_recipe_cards import lookup, resolved

from framework.optim.schedulers import build_scheduler
from framework.registry import LOSSES
from support import REPO

REFERENCE = json.loads((Path(__file__).parent / "data" / "behaviour" / "deeplabv3plus_mmseg.json").read_text())
RECIPES = sorted(REFERENCE["recipes"])


@pytest.fixture(scope="module", params=RECIPES, ids=lambda config: Path(config).stem)
def recipe(request) -> tuple[str, dict]:
    return request.param, resolved(request.param)


def model_node(plain: dict) -> dict:
    return dict(lookup(plain, "task.model"), encoder_weights=None)


@pytest.fixture(scope="module")
def network(recipe) -> torch.nn.Module:
    return built_on_meta(model_node(recipe[1]))


def test_dilated_stages_contract_their_first_block(network):
    body = network.encoder.body
    found = {block: body.get_submodule(f"{block}.conv2").dilation[0] for block in REFERENCE["dilations"]}
    assert found == REFERENCE["dilations"]


def dropouts(network: torch.nn.Module, where) -> list[list]:
    return [[type(m).__name__, m.p] for name, m in network.named_modules()
            if isinstance(m, torch.nn.modules.dropout._DropoutNd) and where(name)]


def test_dropout_only_before_the_classifiers(network):
    expected = REFERENCE["dropouts"]
    assert dropouts(network, lambda name: name.startswith("aspp")) == expected["aspp"]
    assert dropouts(network, lambda name: name.startswith("head")) == [expected["decode_head_before_classifier"]]
    assert dropouts(network, lambda name: name.startswith("aux_head")) == [expected["auxiliary_head"]]
    assert not dropouts(network, lambda name: not name.startswith(("aspp", "head", "aux_head")))


def test_model_settings_and_layout_are_mmsegs(recipe):
    # ASPP rates do not change a shape: they are compared here, the layout through the fingerprint
    node = model_node(recipe[1])
    settings = {key: value for key, value in REFERENCE["model_settings"].items() if key != "source"}
    assert {key: node.get(key) for key in settings} == settings
    cityscapes = fingerprint("deeplabv3plus_r50b_d8_cityscapes")
    network = built_on_meta(dict(node, num_classes=cityscapes["node"]["num_classes"]))
    assert shape_multiset(network) == Counter(cityscapes["shapes"])


def test_cross_entropy_averages_over_every_pixel(recipe):
    case = REFERENCE["cross_entropy"]
    loss = LOSSES.build(lookup(recipe[1], "task.loss"), path="task.loss")
    labels = torch.tensor(case["labels"])
    logits = torch.zeros(labels.shape[0], 3, *labels.shape[1:])
    assert loss(logits, labels).item() == pytest.approx(case["mmseg_value"], rel=1e-6)


def mmengine_poly(base: float, eta_min: float, power: float, total: int, step: int) -> float:
    """mmengine's PolyParamScheduler, step by step (the recurrence in the reference's sources)."""
    lr = base
    for t in range(1, step + 1):
        lr = (lr - eta_min) * (1 - 1 / (total - t + 1)) ** power + eta_min
    return lr


@pytest.mark.parametrize("total", ["80000", "40000"])
def test_reference_learning_rates_are_mmengines_recurrence(total):
    reference = REFERENCE["learning_rate"]
    for step, value in reference[total].items():
        assert mmengine_poly(reference["base_lr"], reference["eta_min"], reference["power"], int(total),
                             int(step)) == pytest.approx(value, rel=1e-12)


def test_learning_rate_at_first_second_mid_and_last_iteration(recipe):
    config, plain = recipe
    max_iters = REFERENCE["recipes"][config]["max_iters"]
    assert plain["train"]["max_iters"] == max_iters
    expected = REFERENCE["learning_rate"][str(max_iters)]
    found = {}
    for step in expected:
        # built as a resumed run builds it: the lr the schedule gives iteration `step`
        parameter = torch.nn.Parameter(torch.zeros(1))
        optimizer = torch.optim.SGD([{"params": [parameter], "initial_lr": plain["optim"]["lr"]}],
                                    lr=plain["optim"]["lr"])
        node = dict(plain["optim"]["scheduler"], last_epoch=int(step) - 1)
        build_scheduler(node, optimizer, max_iters, "optim.scheduler")
        found[step] = optimizer.param_groups[0]["lr"]
    assert found == pytest.approx(expected, rel=1e-9)


def test_effective_batch_is_the_mmseg_configs(recipe):
    config, plain = recipe
    reference = REFERENCE["recipes"][config]
    assert re.search(rf"_{reference['gpus']}xb{reference['per_gpu_batch']}-", reference["mmseg_config"])
    processes = re.findall(r"--nproc_per_node=(\d+)", (REPO / config).read_text())
    assert processes and set(processes) == {str(reference["gpus"])}, f"{config}: its torchrun line"
    assert plain["data"]["train"]["batch_size"] * int(processes[0]) \
        == reference["gpus"] * reference["per_gpu_batch"]
    assert plain["task"]["num_classes"] == reference["num_classes"]


def test_float32_and_the_last_checkpoint(recipe):
    # mmseg's configs train in float32 (no AmpOptimWrapper) and report the last checkpoint
    # (CheckpointHook without save_best): no bf16 autocast, no best-on-val pick
    plain = recipe[1]
    assert plain["amp"]["enabled"] is False
    assert plain["train"]["best_metric"] is None


def test_mmseg_cross_entropy_is_half_the_valid_pixel_mean_here():
    # the two reductions on the same input, as the reference's `why` states
    labels = torch.tensor(REFERENCE["cross_entropy"]["labels"])
    logits = torch.zeros(1, 3, 2, 2)
    valid = LOSSES.build({"type": "CrossEntropyLoss"}, path="loss")(logits, labels).item()
    everywhere = LOSSES.build({"type": "CrossEntropyLoss", "avg_non_ignore": False}, path="loss")(logits, labels)
    assert valid == pytest.approx(math.log(3)) and everywhere.item() == pytest.approx(math.log(3) / 2)


def test_recipes_ask_for_torchvisions_v1_resnet50(recipe):
    assert lookup(recipe[1], "task.model.encoder_weights") == REFERENCE["encoder_weights"]


def test_a_torchvision_weights_tag_names_its_file_and_a_bad_tag_is_refused(tmp_path, monkeypatch):
    from framework.errors import CheckpointError, ConfigError
    from framework.weights.encoder_weights import torchvision_weights_file

    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    with pytest.raises(CheckpointError, match="resnet50-0676ba61.pth"):  # V1's file; DEFAULT's is 11ad3fa6
        torchvision_weights_file("resnet50", "task.model.encoder_weights", "IMAGENET1K_V1")
    with pytest.raises(ConfigError, match="IMAGENET1K_V9"):
        torchvision_weights_file("resnet50", "task.model.encoder_weights", "IMAGENET1K_V9")


def test_recipes_page_states_the_cards_fidelity_and_published_row():
    import yaml

    card = yaml.safe_load((REPO / "docs/recipes/deeplabv3plus_r50_cityscapes.yaml").read_text())
    row = next(line for line in (REPO / "docs/recipes.md").read_text().splitlines()
               if line.startswith("| ") and "recipes/deeplabv3plus_r50_cityscapes.yaml" in line)
    differences = len(card["deviations"])
    assert row.rstrip(" |").endswith(f"listed differences ({differences} on the card)" if differences else "identical")
    assert f"mIoU {card['published']['mIoU']}" in row
    assert card["fingerprints"] == {"task.model": "deeplabv3plus_r50b_d8_cityscapes"}
