"""What people who extend the framework meet: plain datasets, custom_imports from files next to
a config, base nodes replaced by a change of type, class names of their own datasets, extras."""

import json
import os
import re
import subprocess
import sys

import cv2
import numpy as np
import pytest

from framework.config import custom_imports, load_config
from framework.data.sampler import EpochSampler
from framework.errors import ConfigError
from framework.registry import METRICS
from support import REPO, TINY_UNET, call_tool

CONFIG = REPO / "configs/segmentation/unet_shapes.yaml"
TINY = [*TINY_UNET, "data.train.num_workers=0", "train.max_iters=2", "train.ckpt_interval=2", "train.val_interval=0"]
# For configs that replace the datasets: the tiny network and run only.
TINY_RUN = ["device=cpu", "task.model.base_channels=8", "task.model.depth=2", "data.train.batch_size=4",
            "train.max_iters=2", "train.ckpt_interval=2", "train.val_interval=0"]

PLAIN_DATASET = '''
import torch
from torch.utils.data import Dataset
from framework.registry import DATASETS

@DATASETS.register()
class {name}(Dataset):
    """A plain PyTorch dataset: int indices in, tensors out; it records what it was given."""
    seen = []

    def __len__(self):
        return 12

    def __getitem__(self, index):
        type(self).seen.append(index)
        image = torch.full((3, 32, 32), index * 20, dtype=torch.uint8)
        return {{"image": image, "mask": torch.zeros(32, 32, dtype=torch.int64), "index": index}}
'''


def plain_dataset_config(folder, name, imports):
    (folder / "my_modules.py").write_text(PLAIN_DATASET.format(name=name))
    config = folder / "cfg.yaml"
    config.write_text(f"_base_: [{CONFIG}]\ncustom_imports: {imports}\n"
                      f"data:\n  train:\n    dataset: {{type: {name}}}\n    shuffle: true\n")
    return config


@pytest.mark.parametrize("imports", ["[my_modules]", "[./my_modules.py]"])
def test_a_plain_dataset_next_to_a_config_trains_from_any_working_directory(tmp_path, monkeypatch, imports):
    """The config and its module live outside the repository; the run starts somewhere else."""
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir(), elsewhere.mkdir()
    name = f"PlainDataset{len(imports)}"
    config = plain_dataset_config(project, name, imports)
    monkeypatch.chdir(elsewhere)
    result = call_tool("train", "--config", config, "--work-dir", tmp_path / "wd", *TINY_RUN,
                       "data.train.num_workers=0")
    assert result.returncode == 0, result.stderr
    seen = sys.modules["my_modules"].__dict__[name].seen
    assert seen[:2] == [0, 1]  # the start-up check's two samples (framework/engine/startup_check.py)
    assert len(seen) == 2 + 2 * 4 and all(type(i) is int and 0 <= i < 12 for i in seen)  # then 2 batches of 4 ints


def test_the_sampler_yields_seeds_only_to_datasets_that_ask():
    plain = list(EpochSampler(6, seed=1))
    seeded = list(EpochSampler(6, seed=1, with_seed=True))
    assert all(type(i) is int for i in plain)
    assert [i for i, _ in seeded] == plain and len({s for _, s in seeded}) == 6
    # A sample's seed depends on (seed, epoch, index) only: not on the rank, nor on a resume.
    ranks = [pair for rank in (0, 1) for pair in EpochSampler(6, seed=1, rank=rank, world_size=2, with_seed=True)]
    assert sorted(ranks) == sorted(seeded)
    resumed = EpochSampler(6, seed=1, with_seed=True)
    resumed.set_start(4)
    assert list(resumed) == seeded[4:]
    next_epoch = EpochSampler(6, seed=1, with_seed=True)
    next_epoch.set_epoch(1)
    assert {s for _, s in next_epoch}.isdisjoint({s for _, s in seeded})


def test_a_repository_project_imports_from_any_working_directory(tmp_path, monkeypatch):
    """`projects.*` resolve against the framework's checkout even when neither the working
    directory nor sys.path holds it (an installed framework, a config elsewhere)."""
    repository = tmp_path / "checkout"
    (repository / "userprojects_x").mkdir(parents=True)
    (repository / "userprojects_x/__init__.py").write_text("")
    (repository / "userprojects_x/plugin.py").write_text("LOADED = True\n")
    monkeypatch.setattr(custom_imports, "REPOSITORY", repository)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(tmp_path)
    custom_imports.import_custom_modules({"custom_imports": ["userprojects_x.plugin"]})
    assert sys.modules["userprojects_x.plugin"].LOADED


def test_the_repository_projects_import_from_a_working_directory_elsewhere(tmp_path):
    """For real, without the checkout on sys.path: only the framework package is importable (a
    link to it), the working directory is elsewhere. REPOSITORY pointed at framework/ after the
    package split, and a project config failed from any other folder."""
    assert (custom_imports.REPOSITORY / "projects" / "dcgan" / "__init__.py").is_file()
    site = tmp_path / "site"
    site.mkdir()
    (site / "framework").symlink_to(REPO / "framework")
    code = ("import sys; from framework.config import custom_imports\n"
            "custom_imports.import_custom_modules({'custom_imports': ['projects.dcgan']})\n"
            "print(sys.modules['projects.dcgan'].__file__)")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(site)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(REPO / "projects" / "dcgan" / "__init__.py")


def test_a_failed_custom_import_says_what_is_accepted(tmp_path):
    (tmp_path / "broken.py").write_text("import no_such_dependency_here\n")
    with pytest.raises(ConfigError, match=r"cannot import 'nope_module': No module named 'nope_module' "
                                          r"\(custom_imports takes a module name"):
        custom_imports.import_custom_modules({"custom_imports": ["nope_module"]})
    with pytest.raises(ConfigError, match=r"No module named 'no_such_dependency_here'$"):  # names what is missing
        custom_imports.import_custom_modules({"custom_imports": [str(tmp_path / "broken.py")]})


@pytest.mark.parametrize("name, other", [("json", "a standard-library module"),
                                         ("yaml", "an installed module (")])
def test_a_custom_module_file_named_like_another_module_is_refused(tmp_path, name, other):
    (tmp_path / f"{name}.py").write_text("SHADOW = True\n")
    module = sys.modules[name]
    with pytest.raises(ConfigError, match=rf"custom_imports: {tmp_path / name}.py: '{name}' is also the name of "
                                          rf"{re.escape(other)}.*rename the file"):
        custom_imports.import_custom_modules({"custom_imports": [str(tmp_path / f"{name}.py")]})
    assert sys.modules[name] is module and not hasattr(module, "SHADOW")


def test_a_base_node_replaced_by_a_change_of_type_reports_the_dropped_keys(tmp_path):
    config = tmp_path / "cfg.yaml"
    config.write_text(f"_base_: [{CONFIG}]\noptim: {{type: Adam, lr: 1.0e-3}}\n")
    notes = []
    cfg = load_config(config, notes=notes)
    assert "scheduler" not in cfg.optim
    merge_notes = [note for note in notes if not note.startswith("train.best_mode:")]  # (auto's choice)
    assert len(merge_notes) == 1 and merge_notes[0].startswith("optim: type AdamW -> Adam replaces the base's node; "
                                                               "dropped its keys weight_decay, scheduler")
    result = call_tool("train", "--config", config, "--work-dir", tmp_path / "wd", *TINY)
    assert result.returncode == 0, result.stderr
    assert "config: optim: type AdamW -> Adam" in (tmp_path / "wd/train.log").read_text()


def make_folder(root, count=6):
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    rng = np.random.default_rng(0)
    for i in range(count):
        cv2.imwrite(str(root / "images" / f"{i}.png"), rng.integers(0, 255, (32, 32, 3), dtype=np.uint8))
        cv2.imwrite(str(root / "masks" / f"{i}.png"), rng.integers(0, 4, (32, 32), dtype=np.uint8))


def folder_config(tmp_path, metric=""):
    make_folder(tmp_path / "folder")
    dataset = f"{{type: ImageMaskFolder, root: {tmp_path / 'folder'}, classes: [sky, road, car, person]}}"
    config = tmp_path / "cfg.yaml"
    config.write_text(f"_base_: [{CONFIG}]\ndata:\n  train: {{dataset: {dataset}, num_workers: 0}}\n"
                      f"  val: {{dataset: {dataset}, batch_size: 2}}\n"
                      + (f"metrics: [{metric}]\n" if metric else ""))
    return config


def test_a_folder_datasets_class_names_reach_the_metrics(tmp_path):
    """The config inherits the shapes base; its metrics name the folder's classes, not circle & co."""
    result = call_tool("train", "--config", folder_config(tmp_path), "--work-dir", tmp_path / "wd", *TINY_RUN,
                       "train.val_interval=2")
    assert result.returncode == 0, result.stderr
    record = json.loads((tmp_path / "wd/metrics.jsonl").read_text().splitlines()[-1])
    assert {"IoU.sky", "IoU.road", "IoU.car", "IoU.person"} <= set(record)
    assert not [k for k in record if k.endswith(("circle", "rectangle", "triangle"))]


def test_metric_class_names_that_contradict_the_dataset_are_a_config_error(tmp_path):
    metric = "{type: SegmentationMetrics, num_classes: 4, class_names: [a, b, c, d]}"
    result = call_tool("train", "--config", folder_config(tmp_path, metric), "--work-dir", tmp_path / "wd",
                       *TINY_RUN, "train.val_interval=2")
    assert result.returncode == 2
    assert result.stderr.strip() == ("error: metrics[0].class_names: [a, b, c, d] differ from data.val.dataset's "
                                     "classes [sky, road, car, person]; leave them out to use the dataset's")


def test_fid_without_torch_fidelity_names_the_extra(tmp_path, monkeypatch):
    weights = tmp_path / "pt_inception.pth"
    weights.write_bytes(b"not read: the missing package is reported first")
    monkeypatch.setitem(sys.modules, "torch_fidelity", None)  # import fails as when not installed
    with pytest.raises(ConfigError, match=r"needs the torch-fidelity package, which is not installed: "
                                          r"pip install 'segan-framework\[fid\]'"):
        METRICS.build({"type": "FID", "weights_path": str(weights)}, path="metrics[0]")
