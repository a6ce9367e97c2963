"""Which way a metric improves, from its name (framework/config/metric_direction.py): the one rule
behind `train.best_mode: auto` and an EarlyStoppingHook without `rule`."""


import pytest

from framework.config import load_config
from framework.config.metric_direction import metric_direction
from framework.engine.hooks.early_stopping import EarlyStoppingHook
from framework.errors import ConfigError
from framework.registry import HOOKS
from support import REPO

UNET = REPO / "configs/segmentation/unet_shapes.yaml"
CYCLEGAN = REPO / "projects/cyclegan/configs/cyclegan_shapes.yaml"


@pytest.mark.parametrize("name, direction", [
    ("mIoU", "greater"), ("IoU.road", "greater"), ("aAcc", "greater"), ("Acc.cat", "greater"),
    ("accuracy", "greater"), ("PSNR", "greater"), ("PSNR_ab", "greater"), ("ssim", "greater"),
    ("MS-SSIM_fake", "greater"),
    ("loss", "less"), ("loss_g_ab", "less"), ("val_loss", "less"), ("FID", "less"), ("KID", "less"),
    ("SWD_16", "less"), ("L1_ab", "less"),
    # one character off a known name: unknown
    ("score", None), ("PSNRx", None), ("L", None), ("L12", None), ("mIoUs", None), ("lossy", None),
])
def test_direction_from_the_name(name, direction):
    assert metric_direction(name) == direction


@pytest.mark.parametrize("metric, mode", [("mIoU", "max"), ("IoU.circle", "max")])
def test_best_mode_auto_takes_the_direction_of_best_metric_and_says_so(metric, mode):
    notes = []
    cfg = load_config(UNET, [f"train.best_metric={metric}"], notes)
    assert cfg.train.best_mode == mode
    assert notes == [f"train.best_mode: {mode} for train.best_metric {metric} (auto: a greater value is better)"]


def test_best_mode_auto_for_a_distance_is_min():
    notes = []
    cfg = load_config(CYCLEGAN, ["train.best_metric=L1_ab"], notes)
    assert cfg.train.best_mode == "min"
    assert notes == ["train.best_mode: min for train.best_metric L1_ab (auto: a smaller value is better)"]


def test_an_explicit_best_mode_wins_and_no_best_metric_needs_none():
    notes = []
    assert load_config(CYCLEGAN, ["train.best_metric=L1_ab", "train.best_mode=max"], notes).train.best_mode == "max"
    assert load_config(UNET, ["train.best_metric=null"], notes).train.best_mode == "auto"  # never read
    assert notes == []


def test_best_mode_auto_with_an_unknown_name_asks_for_it():
    with pytest.raises(ConfigError) as error:
        load_config(UNET, ["train.best_metric=score"])
    assert str(error.value) == (f"{UNET}: train.best_mode: auto, and the name 'score' (train.best_metric) does not "
                                "say whether a greater or a smaller value is better: set train.best_mode: max or min")


@pytest.mark.parametrize("monitor, rule", [("mIoU", "greater"), ("FID", "less")])
def test_early_stopping_infers_its_rule_and_says_which(monitor, rule, framework_log):
    hook = EarlyStoppingHook(monitor=monitor)
    assert hook.decision.rule == rule
    assert f"early stopping: rule {rule} for {monitor} (from the metric's name; set rule to choose another)" \
        in framework_log.text


def test_early_stopping_keeps_an_explicit_rule_and_asks_for_an_unknown_metric():
    assert EarlyStoppingHook(monitor="L1_ab", rule="greater").decision.rule == "greater"
    with pytest.raises(ConfigError, match=r"^hooks\[2\] \(EarlyStoppingHook\): rule: missing, and the name "
                                          r"'score' does not say whether a greater or a smaller value is better: "
                                          r"set rule: greater or rule: less \(known names: greater: mIoU, "):
        HOOKS.build({"type": "EarlyStoppingHook", "monitor": "score"}, path="hooks[2]")
