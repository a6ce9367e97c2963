"""Auxiliary heads: logits of an encoder map in training only, their weighted loss, under DDP."""

import json

import pytest
import torch
import torch.nn.functional as F
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from framework.errors import ConfigError
from framework.models.aux_head import LogitsWithAux
from framework.optim.optimizers import build_optimizers
from framework.registry import MODELS, TASKS
from support import REPO, run_forked_ranks

SMALL = {"type": "EncoderUNet", "encoder": "resnet18", "num_classes": 3, "decoder_channels": [16, 16, 8, 8, 8]}


def test_the_aux_head_runs_in_training_only_and_answers_at_the_input_size():
    model = MODELS.build({**SMALL, "aux_loss_weight": 0.4}, path="task.model")
    assert model.aux_head[0].in_channels == 256  # layer3, the penultimate map
    out = model.train()(torch.randn(2, 3, 45, 70))
    assert isinstance(out, LogitsWithAux) and out.logits.shape == out.aux_logits.shape == (2, 3, 45, 70)
    with torch.no_grad():
        assert model.eval()(torch.randn(2, 3, 45, 70)).shape == (2, 3, 45, 70)  # a plain tensor in eval
    plain = MODELS.build(SMALL, path="task.model").train()
    assert not hasattr(plain, "aux_head") and isinstance(plain(torch.randn(2, 3, 32, 32)), torch.Tensor)
    shallow = MODELS.build({**SMALL, "aux_loss_weight": 1, "aux_stage": 1, "encoder_depth": 3}, path="task.model")
    assert shallow.aux_head[0].in_channels == 64  # layer1


def test_torchvision_deeplabv3_trains_its_own_aux_classifier():
    model = MODELS.build({"type": "DeepLabV3", "backbone": "mobilenet_v3_large", "num_classes": 3,
                          "aux_loss": True}, path="task.model")
    assert model.aux_loss_weight == 0.5  # torchvision's reference recipe
    out = model.train()(torch.randn(2, 3, 64, 64))
    assert isinstance(out, LogitsWithAux) and out.aux_logits.shape == (2, 3, 64, 64)
    with torch.no_grad():
        assert model.eval()(torch.randn(1, 3, 64, 64)).shape == (1, 3, 64, 64)


def test_the_task_adds_the_weighted_aux_loss_and_trains_the_aux_head():
    task = TASKS.build({"type": "SegmentationTask", "num_classes": 3, "loss": {"type": "CrossEntropyLoss"},
                        "model": {**SMALL, "aux_loss_weight": 0.4}}, path="task")
    optim = build_optimizers({"optim": {"type": "SGD", "lr": 0.1}}, task, max_iters=1)
    batch = {"image": torch.randint(0, 255, (2, 3, 32, 32), dtype=torch.uint8), "mask": torch.randint(0, 3, (2, 32, 32))}
    task.train()
    torch.manual_seed(0)  # the aux head's dropout draws the same mask in both forwards
    out = task.model(task.normalize(batch["image"]))
    main, aux = F.cross_entropy(out.logits, batch["mask"]), F.cross_entropy(out.aux_logits, batch["mask"])
    aux_before = task.model.aux_head[0].weight.detach().clone()

    torch.manual_seed(0)
    logs = task.train_step(batch, optim)
    torch.testing.assert_close(logs["loss_aux"], 0.4 * aux.detach())
    torch.testing.assert_close(logs["loss"], (main + 0.4 * aux).detach())
    assert set(logs) == {"loss", "loss_ce", "loss_aux"}
    assert not torch.equal(task.model.aux_head[0].weight, aux_before)


def test_aux_mistakes_name_the_key():
    for extra, message in (({"aux_loss_weight": -1}, r"aux_loss_weight must be a number >= 0 .* got -1"),
                           ({"aux_loss_weight": "yes"}, r"aux_loss_weight must be a number >= 0 .* got 'yes'"),
                           ({"aux_loss_weight": 0.4, "aux_stage": 5},
                            r"aux_stage must be an index into the encoder's 5 maps \(-5 to 4\), got 5")):
        with pytest.raises(ConfigError, match=r"task.model \(EncoderUNet\): " + message):
            MODELS.build({**SMALL, **extra}, path="task.model")
    with pytest.raises(ConfigError, match=r"task.model \(DeepLabV3\): aux_loss: true needs aux_loss_weight > 0"):
        MODELS.build({"type": "DeepLabV3", "backbone": "mobilenet_v3_large", "num_classes": 3, "aux_loss": True,
                      "aux_loss_weight": 0}, path="task.model")


def test_two_processes_train_an_encoder_unet_with_an_aux_head(tmp_path):
    # DDP (find_unused_parameters off) must see the aux head used in every forward and pass
    # the LogitsWithAux output through.
    config = REPO / "configs" / "segmentation" / "encoder_unet_resnet34_shapes.yaml"
    result = run_forked_ranks(
        2, "train", "--config", config, "--work-dir", tmp_path, "device=cpu", "task.model.encoder=resnet18",
        "task.model.encoder_weights=null", "+task.model.decoder_channels=[16, 16, 8, 8, 8]",
        "+task.model.aux_loss_weight=0.4", "hooks=[]", "optim.param_groups=null",
        "data.train.dataset.size=32", "data.train.dataset.num_samples=8", "data.train.batch_size=2",
        "data.train.num_workers=0", "data.val.dataset.size=32", "data.val.dataset.num_samples=4",
        "data.val.batch_size=2", "train.max_iters=2", "train.log_interval=1", "train.val_interval=2",
        "train.progress_bar=false", folder=tmp_path / "out")
    assert result.returncode == 0, result.stderr[-3000:]
    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    aux, main, total = (events.Scalars(f"train/{name}") for name in ("loss_aux", "loss_ce", "loss"))
    assert [e.step for e in aux] == [1, 2] and all(e.value > 0 for e in aux)
    for a, m, t in zip(aux, main, total):
        assert t.value == pytest.approx(a.value + m.value, rel=1e-5)
    assert "mIoU" in json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
