"""What `framework.load` and a model folder refuse, each in one line naming the culprit; the Hub
parts without huggingface_hub, and with it without any network."""

import shutil
import sys

import numpy as np
import pytest
import yaml
from test_api import no_network  # noqa: F401 (a fixture)

import framework
from framework.errors import CheckpointError, ConfigError, UserError


@pytest.fixture(scope="module")
def unet_folder(unet_run, tmp_path_factory):
    return framework.load(unet_run.work_dir, device="cpu").save_pretrained(tmp_path_factory.mktemp("unet") / "model")


def one_line(error) -> str:
    message = str(error.value)
    assert "\n" not in message and isinstance(error.value, UserError)
    return message


@pytest.mark.parametrize("missing", ["config.yaml", "model.safetensors"])
def test_a_folder_without_config_or_weights(unet_folder, tmp_path, missing):
    folder = shutil.copytree(unet_folder, tmp_path / "model")
    (folder / missing).unlink()
    with pytest.raises(CheckpointError) as error:
        framework.load(folder, device="cpu")
    assert one_line(error) == (f"{folder}: not a model folder, it has no {missing} (save_pretrained writes "
                               "config.yaml, model.safetensors and README.md; a run folder holds checkpoints/)")


def test_weights_of_another_architecture_name_the_key_and_both_shapes(unet_folder, tmp_path):
    folder = shutil.copytree(unet_folder, tmp_path / "model")
    config = yaml.safe_load((folder / "config.yaml").read_text())
    config["task"]["model"]["base_channels"] = 4  # the file's network has 8
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(CheckpointError) as error:
        framework.load(folder, device="cpu")
    message = one_line(error)
    assert message.startswith(f"{folder / 'model.safetensors'}: weights of another architecture: model.")
    assert message.endswith("in the file, (4, 3, 3, 3) in the config's network") and "(8, 3, 3, 3)" in message


def test_a_class_count_other_than_asked(unet_folder, unet_run):
    for source in (unet_folder, unet_run.work_dir):
        with pytest.raises(ConfigError) as error:
            framework.load(source, device="cpu", num_classes=7)
        assert one_line(error) == f"num_classes=7: {source} predicts 4 classes, not 7"


def test_a_run_folder_without_its_config_and_a_checkpoint_without_one(unet_run, tmp_path):
    (tmp_path / "run/checkpoints").mkdir(parents=True)
    with pytest.raises(CheckpointError) as error:
        framework.load(tmp_path / "run", device="cpu")
    assert one_line(error) == f"{tmp_path / 'run'}: a run folder without a checkpoint (checkpoints/best.pth or latest)"
    checkpoint = shutil.copy(unet_run.checkpoint, tmp_path / "run/checkpoints")
    with pytest.raises(CheckpointError) as error:
        framework.load(checkpoint, device="cpu")
    assert one_line(error) == (f"{checkpoint}: no config.yaml in its run folder {tmp_path / 'run'}; "
                               "pass load(..., config=FILE)")
    assert framework.load(checkpoint, device="cpu", config=unet_run.config).classes[0] == "background"


def test_the_wrong_call_or_input_for_the_task(unet_folder):
    model = framework.load(unet_folder, device="cpu")
    with pytest.raises(ConfigError) as error:
        model.generate(num=2)
    assert one_line(error) == "generate: SegmentationTask segments images; use predict"
    with pytest.raises(ConfigError) as error:
        model.predict(np.zeros((32, 32), np.uint8))
    assert one_line(error) == "images: expected H x W x 3 arrays, got shape (32, 32)"
    with pytest.raises(ConfigError) as error:
        model.predict(np.zeros((32, 32, 3), np.uint8), batch_size=0)
    assert one_line(error) == "batch_size: expected an integer >= 1 and <= 4096, got 0"


def test_without_huggingface_hub_the_hub_parts_say_to_install_the_extra(unet_folder, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails as if not installed
    model = framework.load(unet_folder, device="cpu")
    with pytest.raises(ConfigError) as error:
        model.push_to_hub("someone/shapes")
    assert one_line(error) == ("push_to_hub needs huggingface_hub, which is not installed: "
                               "pip install -e '.[hub]'")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CheckpointError) as error:
        framework.load("someone/shapes", device="cpu")
    assert one_line(error) == ("someone/shapes: no such file or folder (a Hub name is read from the local "
                               "Hugging Face cache, which needs huggingface_hub: pip install -e '.[hub]')")


def test_a_hub_name_is_read_from_the_local_cache_only(unet_folder, tmp_path, monkeypatch, no_network):  # noqa: F811
    pytest.importorskip("huggingface_hub")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(CheckpointError) as error:
        framework.load("someone/shapes", device="cpu")
    assert one_line(error) == ("someone/shapes: no such file or folder, nor a model in the local Hugging Face "
                               "cache (nothing is downloaded: `huggingface-cli download someone/shapes` first)")
    # the cache's layout: models--<user>--<name>/refs/main names the snapshot folder
    repo = tmp_path / "hub/models--someone--shapes"
    shutil.copytree(unet_folder, repo / "snapshots/0123abc")
    (repo / "refs").mkdir()
    (repo / "refs/main").write_text("0123abc")
    assert framework.load("someone/shapes", device="cpu").classes == framework.load(unet_folder).classes
    assert no_network == []


def test_push_to_hub_uploads_the_model_folder(unet_folder, tmp_path, monkeypatch, no_network):  # noqa: F811
    hub = pytest.importorskip("huggingface_hub")
    calls = []
    monkeypatch.setattr(hub, "create_repo", lambda repo, **options: calls.append(("create", repo, options)))

    def upload_folder(repo_id, folder_path, **options):  # what would be sent, kept
        shutil.copytree(folder_path, tmp_path / "sent")
        calls.append(("upload", repo_id, options))
        return f"https://huggingface.co/{repo_id}"

    monkeypatch.setattr(hub, "upload_folder", upload_folder)
    model = framework.load(unet_folder, device="cpu")
    url = model.push_to_hub("someone/shapes", private=True, commit_message="first")
    assert url == "https://huggingface.co/someone/shapes"
    assert calls == [("create", "someone/shapes", {"exist_ok": True, "token": None, "private": True}),
                     ("upload", "someone/shapes", {"commit_message": "first"})]
    assert sorted(p.name for p in (tmp_path / "sent").iterdir()) == ["README.md", "config.yaml", "model.safetensors"]
    assert framework.load(tmp_path / "sent", device="cpu").classes == model.classes
    assert no_network == []
