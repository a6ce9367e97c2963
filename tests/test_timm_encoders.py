"""`encoder: timm:<name>`: timm models as encoders, their weights files, and the optional extra."""

import json
import sys

import pytest
import torch
from safetensors.torch import save_file

from framework.engine.pretrained import load_pretrained
from framework.errors import CheckpointError, ConfigError
from framework.models.decoders import FPN, DeepLabV3Plus, EncoderUNet
from framework.models.encoders import build_encoder
from framework.registry import MODELS, TASKS
from support import REPO, run_tool

timm = pytest.importorskip("timm")  # the `timm` extra, installed with `dev`

SIZES = ((64, 64), (45, 70))


def segmentation_task(model):
    return TASKS.build({"type": "SegmentationTask", "num_classes": 3, "loss": {"type": "CrossEntropyLoss"},
                        "model": model}, path="task")


@pytest.mark.parametrize("name, strides", [("resnet18", [2, 4, 8, 16, 32]), ("efficientnet_b0", [2, 4, 8, 16, 32]),
                                           ("convnext_atto", [4, 8, 16, 32])])
def test_every_decoder_on_timm_encoders_returns_logits_at_the_input_size(name, strides):
    encoder = build_encoder(f"timm:{name}")
    assert encoder.strides == strides
    for decoder in (EncoderUNet, FPN, DeepLabV3Plus):
        model = decoder(encoder=encoder, num_classes=3).eval()
        for height, width in SIZES:
            with torch.no_grad():
                assert model(torch.randn(1, 3, height, width)).shape == (1, 3, height, width), decoder.__name__


def test_output_stride_and_depth_reach_the_timm_model():
    model = MODELS.build({"type": "DeepLabV3Plus", "encoder": "timm:resnet18", "num_classes": 2,
                          "output_stride": 16}, path="task.model").eval()
    assert model.encoder.strides == [2, 4, 8, 16, 16]
    with torch.no_grad():
        assert model(torch.randn(2, 3, 45, 70)).shape == (2, 2, 45, 70)
    shallow = build_encoder("timm:resnet18", depth=3)
    assert shallow.strides == [2, 4, 8] and shallow.channels == [64, 64, 128]
    assert not [k for k in shallow.state_dict() if k.startswith(("model.layer3", "model.layer4", "model.fc"))]
    assert [f.shape[1] for f in shallow(torch.randn(1, 3, 64, 64))] == [64, 64, 128]


def test_a_timm_layout_file_loads_whole_and_adapts_the_stem(tmp_path):
    torch.manual_seed(0)
    weights = {"model." + k: v for k, v in timm.create_model("efficientnet_b0").state_dict().items()}
    save_file(weights, tmp_path / "effnet.safetensors")  # as a framework checkpoint's encoder would be saved
    model = MODELS.build({"type": "FPN", "encoder": "timm:efficientnet_b0", "num_classes": 3, "in_channels": 4,
                          "encoder_weights": str(tmp_path / "effnet.safetensors")}, path="task.model")
    load_pretrained(segmentation_task(model), None, str(tmp_path))
    report = json.loads((tmp_path / "load_report.json").read_text())["task.model (encoder_weights)"]
    own = model.state_dict()
    assert [e["key"] for e in report["loaded"]] == [k for k in own if k.startswith("encoder.")]  # 100%
    assert [e["key"] for e in report["missing"]] == [k for k in own if not k.startswith("encoder.")]
    (stem,) = [e for e in report["loaded"] if e.get("adapted")]
    assert stem["key"] == "encoder.model.conv_stem.weight" and stem["model_shape"][1] == 4
    stem_weight = model.encoder.model.conv_stem.weight
    assert torch.equal(stem_weight[:, :3], weights["model.conv_stem.weight"]) and not stem_weight[:, 3].any()
    # the classifier and the last 1x1 conv after the deepest stage are not part of the encoder
    assert {e["source"] for e in report["unexpected"]} == {k for k in weights
                                                         if k.startswith(("model.classifier", "model.conv_head",
                                                                          "model.bn2"))}


def fake_hub_cache(cache, repo: str, weights: dict) -> None:
    """The layout huggingface_hub leaves after a download: refs/main names the snapshot."""
    folder = cache / f"models--{repo.replace('/', '--')}"
    (folder / "snapshots" / "0123abcd").mkdir(parents=True)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text("0123abcd")
    save_file(weights, folder / "snapshots" / "0123abcd" / "model.safetensors")


TINY_RUN = ["device=cpu", "data.train.dataset.size=32", "data.train.dataset.num_samples=4", "data.train.batch_size=2",
            "data.train.num_workers=0", "data.val.dataset.size=32", "data.val.dataset.num_samples=2",
            "data.val.batch_size=2", "train.val_interval=0", "train.log_interval=1", "train.max_iters=1",
            "task.model.encoder=timm:resnet18", "task.model.encoder_weights=timm",
            "+task.model.decoder_channels=[16, 16, 8, 8, 8]"]
CONFIG = REPO / "configs" / "segmentation" / "encoder_unet_resnet34_shapes.yaml"


def test_encoder_weights_timm_reads_the_local_hugging_face_cache_only(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a download attempt would fail, not pass unseen
    missing = run_tool("train", "--config", CONFIG, "--work-dir", tmp_path / "missing", *TINY_RUN)
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines()[-1].startswith(
        "error: task.model.encoder_weights: timm weights of resnet18 need model.safetensors of the Hugging Face "
        f"repo timm/resnet18.a1_in1k in the cache {tmp_path / 'hub'} (nothing is downloaded at run time;")

    torch.manual_seed(0)
    weights = timm.create_model("resnet18").state_dict()
    fake_hub_cache(tmp_path / "hub", "timm/resnet18.a1_in1k", weights)
    result = run_tool("train", "--config", CONFIG, "--work-dir", tmp_path / "run", *TINY_RUN)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "run" / "load_report.json").read_text())["task.model (encoder_weights)"]
    assert report["checkpoint"].endswith("models--timm--resnet18.a1_in1k/snapshots/0123abcd/model.safetensors")
    assert report["counts"]["loaded"] == len(weights) - 2  # all but the classifier (fc)
    assert {e["source"] for e in report["unexpected"]} == {"fc.weight", "fc.bias"}


def test_timm_mistakes_are_one_clear_error():
    with pytest.raises(ConfigError, match=r"task.model \(EncoderUNet\): timm has no model 'resnet181'; "
                                          r"did you mean 'resnet18'"):
        MODELS.build({"type": "EncoderUNet", "encoder": "timm:resnet181", "num_classes": 3}, path="task.model")
    with pytest.raises(ConfigError, match=r"encoder_depth must be an integer from 1 to 4 for timm:convnext_atto"):
        MODELS.build({"type": "EncoderUNet", "encoder": "timm:convnext_atto", "num_classes": 3, "encoder_depth": 5},
                     path="task.model")
    for encoder, weights, message in (("timm:resnet18", "torchvision", "is not a torchvision model"),
                                      ("resnet18", "timm", "is not a timm model")):
        task = segmentation_task(EncoderUNet(encoder, num_classes=3, encoder_weights=weights))
        with pytest.raises(ConfigError, match=rf"task.model.encoder_weights: {weights}: the encoder .* {message}"):
            load_pretrained(task, None, None)
    with pytest.raises(ConfigError, match=r"task.model \(EncoderUNet\): timm: Invalid pretrained tag \(bogus_tag\)"):
        MODELS.build({"type": "EncoderUNet", "encoder": "timm:resnet18.bogus_tag", "num_classes": 3}, path="task.model")


def test_without_timm_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "timm", None)  # what `import timm` meets when it is not installed
    with pytest.raises(ConfigError, match=r"encoder 'timm:resnet18' needs timm, an optional extra: "
                                          r"pip install -e \"\.\[timm\]\""):
        MODELS.build({"type": "EncoderUNet", "encoder": "timm:resnet18", "num_classes": 3}, path="task.model")



def test_timm_weights_only_at_a_url_come_from_the_torch_hub_cache(tmp_path, monkeypatch):
    from framework.weights.encoder_weights import timm_weights_file

    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    folder = tmp_path / "torch" / "hub" / "checkpoints"
    url = timm.models.get_pretrained_cfg("gcvit_xxtiny").url  # one of the few timm weights not on the HF hub
    file_name = url.rsplit("/", 1)[-1]
    with pytest.raises(CheckpointError, match=rf"w: timm weights of gcvit_xxtiny need the file {file_name} in {folder} "
                                              rf"\(nothing is downloaded at run time; fetch {url} there"):
        timm_weights_file("gcvit_xxtiny", "w")
    folder.mkdir(parents=True)
    (folder / file_name).write_bytes(b"")
    assert timm_weights_file("gcvit_xxtiny", "w") == str(folder / file_name)
