"""No number of a config may be NaN or infinite (framework/config/rules.py, `nonfinite_numbers`):
component keywords included (task loss weights, hook thresholds, scheduler and optimizer
keywords, list items), refused by `load_config` naming the key; infinity only where
`INFINITY_ALLOWED` gives it a meaning."""

import math

import pytest

from framework.config import load_config
from framework.config.rules import INFINITY_ALLOWED, nonfinite_numbers
from framework.errors import ConfigError
from support import REPO, call_tool

CYCLEGAN = REPO / "projects/cyclegan/configs/cyclegan_shapes.yaml"
UNET = REPO / "configs/segmentation/unet_shapes.yaml"
EARLY_STOP = "hooks=[{type: EarlyStoppingHook, monitor: PSNR_ab, rule: greater, stopping_threshold: %s}]"


@pytest.mark.parametrize("override, key, shown", [
    ("task.cycle_weight=nan", "task.cycle_weight", "'nan'"),  # an override's word: a string float() reads
    ("+task.adv_weight=inf", "task.adv_weight", "'inf'"),
    ("+task.d_weight=.nan", "task.d_weight", "nan"),  # YAML's own spelling: a float
    ("+task.d_weight=-Infinity", "task.d_weight", "'-Infinity'"),
    ("task.generator_ab.base_channels=.inf", "task.generator_ab.base_channels", "inf"),  # a model keyword
    (EARLY_STOP % ".nan", "hooks[0].stopping_threshold", "nan"),
    ("optimizers.generators.betas=[0.5,.nan]", "optimizers.generators.betas[1]", "nan"),  # a list item
    ("optimizers.discriminators.scheduler.decay_start=-.inf", "optimizers.discriminators.scheduler.decay_start",
     "-inf"),
])
def test_a_nonfinite_number_anywhere_is_refused_naming_its_key(override, key, shown):
    with pytest.raises(ConfigError) as error:
        load_config(CYCLEGAN, [override])
    assert str(error.value) == (f"{CYCLEGAN}: {key}: expected a finite number, got {shown} "
                                "(a config refuses NaN and infinity; inf only in clip_grad.norm_type)")


def test_every_nonfinite_loss_weight_is_reported_at_once():
    with pytest.raises(ConfigError) as error:
        load_config(CYCLEGAN, ["task.cycle_weight=nan", "+task.adv_weight=inf", "+task.d_weight=nan"])
    assert [line.split(": ")[1] for line in str(error.value).splitlines()] == [
        "task.cycle_weight", "task.adv_weight", "task.d_weight"]


def test_the_largest_finite_numbers_and_words_that_are_no_number_are_accepted():
    cfg = load_config(CYCLEGAN, [f"task.cycle_weight={math.ulp(0.0)}", "+task.adv_weight=1.7976931348623157e308",
                                 "+task.d_weight=-1.7976931348623157e308", "task.gan_loss=infinite"])
    assert cfg.task.adv_weight == 1.7976931348623157e308 and cfg.task.gan_loss == "infinite"


def test_number_words_outside_component_nodes_are_strings_their_keys_check():
    cfg = load_config(UNET, ["work_dir=inf", "train.best_metric=nan", "train.best_mode=max"])
    assert cfg.work_dir == "inf"  # a folder name
    assert nonfinite_numbers({"work_dir": "nan", "task": {"type": "T", "w": {"x": ["-Inf"]}}}) == [
        "task.w.x[0]: expected a finite number, got '-Inf' (a config refuses NaN and infinity; "
        "inf only in clip_grad.norm_type)"]  # below a node, in nested keywords too


def test_a_key_with_its_own_rule_reports_once():
    with pytest.raises(ConfigError) as error:
        load_config(UNET, ["optim.lr=.nan"])
    assert str(error.value) == f"{UNET}: optim.lr: expected a finite number > 0, got nan"


def test_infinity_only_where_the_key_gives_it_a_meaning():
    assert set(INFINITY_ALLOWED) == {"clip_grad.norm_type"}
    cfg = load_config(UNET, ["+optim.clip_grad={max_norm: 1.0, norm_type: .inf}"])
    assert cfg.optim.clip_grad.norm_type == math.inf
    with pytest.raises(ConfigError, match=r"optim\.clip_grad\.norm_type: expected a number > 0, got nan$"):
        load_config(UNET, ["+optim.clip_grad={max_norm: 1.0, norm_type: .nan}"])
    # the same word in a key of another name is refused: the match is on the key path's end
    assert nonfinite_numbers({"task": {"norm_type": math.inf}}) == [
        "task.norm_type: expected a finite number, got inf (a config refuses NaN and infinity; "
        "inf only in clip_grad.norm_type)"]
    assert nonfinite_numbers({"optim": {"clip_grad": {"norm_type": math.inf}}}) == []


def test_train_refuses_a_nan_loss_weight_in_one_line_before_writing(tmp_path):
    work_dir = tmp_path / "run"
    result = call_tool("train", "--config", CYCLEGAN, "--work-dir", work_dir, "task.cycle_weight=nan")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {CYCLEGAN}: task.cycle_weight: expected a finite number, got 'nan' "
        "(a config refuses NaN and infinity; inf only in clip_grad.norm_type)"]
    assert not work_dir.exists()
