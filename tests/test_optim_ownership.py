"""Every trainable parameter has exactly one optimizer (framework/optim/ownership.py), on the
shipped CycleGAN and segmentation configs with the overrides a user would write, and the run
summary counts as trained what the optimizers hold."""

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from framework.config import import_custom_modules, load_config, to_plain
from framework.engine.build import build_networks, log_run_summary
from framework.errors import ConfigError
from framework.optim.optimizers import build_optimizers

CYCLEGAN = "projects/cyclegan/configs/cyclegan_shapes.yaml"
MOBILENET_UNET = "configs/segmentation/encoder_unet_mobilenet_v3_shapes.yaml"


def built(config, tmp_path, *overrides):
    """(plain config, task with frozen settings applied, optimizers) as train.py builds them."""
    cfg = load_config(config, list(overrides))
    import_custom_modules(cfg)
    plain = to_plain(cfg)
    task = build_networks(plain, torch.device("cpu"), str(tmp_path), load_pretrained=False)
    return plain, task, build_optimizers(plain, task, max_iters=plain["train"]["max_iters"])


def optimized(optim) -> set[int]:
    return {id(p) for name in optim.names for p in optim.params(name)}


def test_shipped_cyclegan_config_optimizes_every_network(tmp_path):
    _, task, optim = built(CYCLEGAN, tmp_path)
    assert optimized(optim) == {id(p) for p in task.parameters() if p.requires_grad}


def test_a_cyclegan_generator_in_no_optimizer_is_refused_by_name(tmp_path):
    with pytest.raises(ConfigError, match=r"^optimizers: trainable parameters in no optimizer would keep their "
                                          r"initial values: generator_ba \(\d+\.\dK\); add them to an optimizer's "
                                          r"params, or freeze them with frozen: in their network's model node$"):
        built(CYCLEGAN, tmp_path, "optimizers.generators.params=[generator_ab]")


def test_a_generator_the_config_freezes_may_stay_out_of_the_optimizers(tmp_path):
    _, task, optim = built(CYCLEGAN, tmp_path, "optimizers.generators.params=[generator_ab]",
                           "+task.generator_ba.frozen=true")
    assert optimized(optim) == {id(p) for name in ("generator_ab", "discriminator_a", "discriminator_b")
                                for p in getattr(task, name).parameters()}
    assert not any(p.requires_grad for p in task.generator_ba.parameters())


def test_a_parameter_in_two_optimizers_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"^optimizers\.discriminators\.params: parameters of "
                                          r"'\['discriminator_a', 'discriminator_b', 'generator_ba'\]' are already "
                                          r"optimized by 'generators'"):
        built(CYCLEGAN, tmp_path, "optimizers.discriminators.params=[discriminator_a,discriminator_b,generator_ba]")


def test_segmentation_optimizer_over_the_encoder_only_names_the_decoder_and_head(tmp_path):
    with pytest.raises(ConfigError, match=r"^optim: trainable parameters in no optimizer would keep their initial "
                                          r"values: model\.blocks \([\d.]+[KM]\), model\.head \(\d+\)"):
        built(MOBILENET_UNET, tmp_path, "task.model.encoder_weights=null", "+optim.params=model.encoder",
              "optim.param_groups=null")


class ScaledHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(3))  # held by the module itself, not by a child
        self.conv = nn.Conv2d(3, 3, 1)


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.first, self.second = ScaledHead(), ScaledHead()


def test_a_parameter_left_out_of_a_partly_optimized_module_is_named_alone():
    # first.conv optimized, first.scale not: the parameter is named, not the whole of `first`
    with pytest.raises(ConfigError, match=r"values: first\.scale \(3\), second \(15\);"):
        build_optimizers({"optim": {"type": "SGD", "lr": 0.1, "params": "first.conv"}}, TwoHeads(), max_iters=1)


def test_a_frozen_parameter_of_a_partly_optimized_module_is_not_refused():
    task = TwoHeads()
    task.first.scale.requires_grad_(False)  # frozen: it belongs in no optimizer, and first.conv is optimized
    optim = build_optimizers({"optim": {"type": "SGD", "lr": 0.1, "params": ["first.conv", "second"]}}, task,
                             max_iters=1)
    assert optimized(optim) == {id(p) for p in (*task.first.conv.parameters(), *task.second.parameters())}


def test_segmentation_with_the_decoder_frozen_builds_and_the_summary_counts_only_the_optimized(
        tmp_path, framework_log):
    plain, task, optim = built(MOBILENET_UNET, tmp_path, "task.model.encoder_weights=null",
                               "+optim.params=model.encoder", "optim.param_groups=null",
                               "+task.model.frozen=[blocks,head]")
    encoder = sum(p.numel() for p in task.model.encoder.parameters())
    total = sum(p.numel() for p in task.parameters())
    assert optimized(optim) == {id(p) for p in task.model.encoder.parameters()}
    trainer = SimpleNamespace(task=task, optim=optim, work_dir=str(tmp_path), device=torch.device("cpu"),
                              accumulate=1, max_iters=7)
    log_run_summary(trainer, batch=2)
    assert f"parameters {total / 1e6:.2f}M ({encoder / 1e6:.2f}M trained)" in framework_log.text
    assert f"{encoder / 1e6:.2f}M" != f"{total / 1e6:.2f}M"  # the two counts tell apart
