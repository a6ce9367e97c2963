"""The held-out synthesis protocol's parts at toy size (benchmarks/quality/heldout_synthesis.py): the scene
families on disk as the framework's VOCSegmentation reads them, their class frequencies, the
refusal of folders they did not write, the judge's mIoU, the plain scripts' resumption and the report."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.quality.heldout import families, judge, report, units  # noqa: E402
from benchmarks.quality.heldout_synthesis import claim_work_dir  # noqa: E402
from framework.data import VOCSegmentation  # noqa: E402
from framework.errors import ConfigError  # noqa: E402


@pytest.mark.parametrize("name", list(families.FAMILIES))
def test_a_family_is_read_by_the_frameworks_voc_reader(tmp_path, name):
    family = families.FAMILIES[name]
    root = families.write_family(name, tmp_path / name, seed=3, train=5, val=2)
    for split, count in (("train", 5), ("val", 2)):
        dataset = VOCSegmentation(str(root), split=split, classes=family.class_names)
        assert len(dataset) == count
        sample = dataset[0]
        assert tuple(sample["image"].shape) == (3, family.size, family.size)
        assert tuple(sample["mask"].shape) == (family.size, family.size)
        assert int(sample["mask"].max()) < len(family.classes)


def test_the_sizes_are_64_and_128_and_one_family_is_held_out():
    assert {f.size for f in families.FAMILIES.values()} == {64, 128}
    assert families.HELD_OUT in families.FAMILIES and families.HELD_OUT not in families.TUNING
    assert all(400 <= f.train + f.val <= 2000 for f in families.FAMILIES.values())


@pytest.mark.parametrize("name", ["blobs", "bands128"])
def test_pixel_frequencies_follow_the_designed_imbalance(name):
    family = families.FAMILIES[name]
    counts = np.zeros(len(family.classes))
    for i in range(120):
        _, labels = families.render(family, np.random.default_rng([7, i]))
        counts += np.bincount(labels.ravel(), minlength=len(family.classes))
    measured = counts / counts.sum()
    assert np.abs(measured - np.array(family.weights)).max() < 0.06
    assert measured[0] > 3 * measured[-1]  # the most frequent class at least 3x the rarest, as designed


def test_a_region_colour_does_not_tell_its_class():
    """Mean colour per class over many scenes: within a few grey levels of each other (a texture's
    own mean, e.g. sparse spots on a dark ground, would set its class 30 levels apart)."""
    family = families.FAMILIES["gratings"]
    sums, counts = np.zeros((7, 3)), np.zeros(7)
    for i in range(200):
        image, labels = families.render(family, np.random.default_rng([1, i]))
        for c in range(7):
            sums[c] += image[labels == c].reshape(-1, 3).sum(0)
            counts[c] += (labels == c).sum()
    means = sums / counts[:, None]
    assert np.ptp(means, axis=0).max() < 20  # region colours range over 50..205


def test_writing_is_deterministic_and_refuses_foreign_folders(tmp_path):
    first = families.write_family("gratings", tmp_path / "a", seed=1, train=3, val=1)
    second = families.write_family("gratings", tmp_path / "b", seed=1, train=3, val=1)
    other = families.write_family("gratings", tmp_path / "c", seed=2, train=3, val=1)
    jpeg = "JPEGImages/train_00002.jpg"
    assert (first / jpeg).read_bytes() == (second / jpeg).read_bytes() != (other / jpeg).read_bytes()
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not empty"):
        families.write_family("gratings", foreign, train=3, val=1)
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]
    stamp = (first / jpeg).stat().st_mtime_ns
    families.write_family("gratings", first, seed=1, train=3, val=1)  # done already: kept as it is
    assert (first / jpeg).stat().st_mtime_ns == stamp
    families.write_family("gratings", first, seed=1, train=2, val=1)  # ours, other counts: written anew
    assert (first / "ImageSets/Segmentation/train.txt").read_text().split() == ["train_00000", "train_00001"]


def test_the_work_dir_is_refused_when_foreign_or_of_other_settings(tmp_path):
    (tmp_path / "x.txt").write_text("someone's")
    with pytest.raises(ConfigError, match="not empty"):
        claim_work_dir(tmp_path, {"iters": 40})
    claim_work_dir(tmp_path / "w", {"iters": 40})
    claim_work_dir(tmp_path / "w", {"iters": 40})
    with pytest.raises(ConfigError, match="iters 40 -> 2000"):
        claim_work_dir(tmp_path / "w", {"iters": 2000})


def test_miou_counts_one_confusion_matrix_over_the_classes_seen():
    truth = torch.tensor([[0, 0, 1, 1]])
    predicted = torch.tensor([[0, 1, 1, 1]])
    assert judge.miou(predicted, truth, 3) == pytest.approx((1 / 2 + 2 / 3) / 2)  # class 2 never seen: left out


def test_the_judge_trains_and_scores_a_toy_folder(tmp_path):
    root = families.write_family("gratings", tmp_path / "g", train=4, val=2)
    result = units.judge_unit(root, tmp_path, 7, iters=2, batch=4)
    assert 0 <= result["mIoU_real"] <= 1 and (tmp_path / "judge.pth").is_file()
    units.load_judge(tmp_path, 7)


def test_a_plain_run_cut_short_resumes_to_the_same_weights(tmp_path, monkeypatch):
    torch.manual_seed(0)
    masks = torch.randint(0, 3, (8, 16, 16))
    images = torch.randint(0, 256, (8, 3, 16, 16), dtype=torch.uint8)
    scorer = judge.make_judge(3).eval()
    data = (images, masks, ["a", "b"], masks[:2])
    monkeypatch.setattr(units, "CHECKPOINT_EVERY", 1)
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    whole.mkdir(), cut.mkdir()
    torch.manual_seed(5)  # the global RNG the run's noise and LabelMix coins come from
    expected = units.plain_unit("oasis_paper", False, 0, data, 3, 3, whole, scorer, print, batch=4)
    torch.manual_seed(5)
    units.plain_unit("oasis_paper", False, 0, data, 3, 2, cut, scorer, print, batch=4)
    torch.manual_seed(99)  # a new process: other RNG state, restored from the checkpoint
    resumed = units.plain_unit("oasis_paper", False, 0, data, 3, 3, cut, scorer, print, batch=4)
    saved_whole, saved_cut = torch.load(whole / "state.pth"), torch.load(cut / "state.pth")
    for key, value in saved_whole["G"].items():
        assert torch.equal(value, saved_cut["G"][key]), key
    assert resumed["live"]["mIoU"] == expected["live"]["mIoU"]


def test_the_report_gives_mean_and_sd_per_generator_and_sets_the_held_out_family_apart(tmp_path):
    for family, real in (("gratings", 0.8), ("blobs", 0.5)):
        results = tmp_path / family / "results"
        results.mkdir(parents=True)
        (results / "judge.json").write_text(json.dumps({"mIoU_real": real}))
        for seed, value in ((0, 0.4), (1, 0.6)):
            entry = {"mIoU": value, "diversity": 0.05}
            (results / f"oasis_textures_seed{seed}.json").write_text(json.dumps({"ema": entry, "live": entry}))
    markdown, data = report.write_report(tmp_path, ["gratings", "blobs", "bands128"], "blobs", {})
    text = markdown.read_text()
    assert "| oasis_textures (ema) | 0.500 ± 0.141 (2 seeds) | 0.625 ± 0.177 (2 seeds)" in text
    assert "## blobs (held out" in text and "## gratings\n" in text
    assert "judge: runs in progress" in text and "| runs in progress |" in text  # bands128: nothing measured yet
    assert json.loads(data.read_text())["families"]["blobs"]["rows"]["oasis_textures (live)"]["seeds"] == [0, 1]


@pytest.mark.parametrize("shipped, discriminator", [("oasis_textures", {"num_classes": 7}),
                                                    ("spade_textures", {"in_channels": 9})])
def test_a_shipped_config_is_retargeted_to_a_family_folder(tmp_path, shipped, discriminator):
    from benchmarks.quality.heldout.config_runs import REPO, retargeted_config
    from framework.config.loading import load_config

    family = families.FAMILIES["blobs"]  # 6 classes
    root = families.write_family("blobs", tmp_path / "blobs", train=2, val=1)
    path = retargeted_config(REPO / f"configs/synthesis/{shipped}.yaml", family, root, 40, tmp_path / "configs")
    cfg = load_config(path)
    assert cfg.task.num_classes == cfg.task.generator.num_classes == 6
    assert {key: cfg.task.discriminator[key] for key in discriminator} == discriminator
    assert cfg.data.val.dataset.type == "VOCSegmentation" and cfg.data.val.dataset.split == "val"
    assert list(cfg.data.train.dataset.classes) == family.class_names and cfg.data.train.dataset.root == str(root)
    assert [m.type for m in cfg.metrics] == ["Diversity"] and cfg.train.max_iters == cfg.train.val_interval == 40
    assert cfg.task.ema_decay == 0.99 and cfg.optimizers.generator.lr == 1e-4  # the shipped settings stay


def test_the_64_px_families_run_seed_by_seed_before_the_128_px_one():
    from benchmarks.quality.heldout_synthesis import ORDER, schedule

    order = schedule(ORDER, [0, 1])
    assert order[:4] == [(0, "gratings"), (0, "blobs"), (1, "gratings"), (1, "blobs")]
    assert order[4:] == [(0, "bands128"), (1, "bands128")]
