"""CycleGANTask against a hand-written CycleGAN iteration (with and without lazy R1), the unpaired datasets, the image pool
as state and the LinearDecayLR schedule (the tools, DDP, accumulation and resume are tested in
projects/cyclegan/tests)."""

import copy
import re

import cv2
import numpy as np
import pytest
import torch
from torch import nn

import framework.tasks  # noqa: F401  (registers CycleGANTask)
from framework.data import UnpairedImageFolders
from framework.data.unpaired import UnpairedImageDataset
from framework.errors import DataError
from framework.optim.optimizers import build_optimizers
from framework.optim.schedulers import LinearDecayLR
from framework.tasks.cyclegan import CycleGANTask
from framework.tasks.image_pool import ImagePool
from support import REPO, named

POOL_SIZE = 3  # batch 2: full after the second iteration, so the third swaps
ITERATIONS = 3
CYCLE, IDENTITY, D_WEIGHT = 10.0, 0.5, 0.5
R1_WEIGHT, R1_INTERVAL = 10.0, 2  # 3 iterations: the penalty on the second only


def generator():
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 3, 3, padding=1), nn.Tanh())


def discriminator():
    return nn.Sequential(nn.Conv2d(3, 4, 4, 2, 1), nn.LeakyReLU(0.2), nn.Conv2d(4, 1, 3, padding=1))


def batches():
    generator = torch.Generator().manual_seed(7)
    return [{"a": torch.randint(0, 256, (2, 3, 8, 8), dtype=torch.uint8, generator=generator),
             "b": torch.randint(0, 256, (2, 3, 8, 8), dtype=torch.uint8, generator=generator)}
            for _ in range(ITERATIONS)]


class ReferencePool:
    """The original CycleGAN's ImagePool, drawing from a torch.Generator of the given seed."""

    def __init__(self, size, seed):
        self.size, self.images = size, []
        self.generator = torch.Generator().manual_seed(seed)

    def query(self, images):
        out = []
        for image in images:
            image = image.unsqueeze(0)
            if len(self.images) < self.size:
                self.images.append(image)
                out.append(image)
            elif torch.rand((), generator=self.generator).item() > 0.5:
                i = int(torch.randint(0, self.size, (), generator=self.generator))
                out.append(self.images[i].clone())
                self.images[i] = image
            else:
                out.append(image)
        return torch.cat(out)


def reference_run(nets, seed, r1_weight=0.0):
    """The iterations written out plainly: lsgan, cycle and identity L1, D frozen in the G step,
    D on real and pooled fakes (drawn before G's update), Adam on each pair of networks; with
    r1_weight, every R1_INTERVAL-th D loss adds r1_weight / 2 x R1_INTERVAL x the mean over the
    reals of the squared norm of the gradient of each real's mean logit. Returns the pools and
    {(iteration, domain): R1 term}."""
    g_ab, g_ba, d_a, d_b = nets
    opt_g = torch.optim.Adam([*g_ab.parameters(), *g_ba.parameters()], lr=1e-2, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam([*d_a.parameters(), *d_b.parameters()], lr=1e-2, betas=(0.5, 0.999))
    pool_a, pool_b = ReferencePool(POOL_SIZE, 4 * seed + 1), ReferencePool(POOL_SIZE, 4 * seed + 2)
    mse = nn.MSELoss()
    penalties = {}
    for iteration, batch in enumerate(batches(), start=1):
        a, b = batch["a"].float() / 127.5 - 1, batch["b"].float() / 127.5 - 1
        fake_b, fake_a = g_ab(a), g_ba(b)
        rec_a, rec_b = g_ba(fake_b), g_ab(fake_a)
        for p in [*d_a.parameters(), *d_b.parameters()]:
            p.requires_grad_(False)
        opt_g.zero_grad()
        pred_b, pred_a = d_b(fake_b), d_a(fake_a)
        loss_g = (mse(pred_b, torch.ones_like(pred_b)) + mse(pred_a, torch.ones_like(pred_a))
                  + CYCLE * (rec_a - a).abs().mean() + CYCLE * (rec_b - b).abs().mean()
                  + CYCLE * IDENTITY * ((g_ba(a) - a).abs().mean() + (g_ab(b) - b).abs().mean()))
        loss_g.backward()
        opt_g.step()
        for p in [*d_a.parameters(), *d_b.parameters()]:
            p.requires_grad_(True)
        opt_d.zero_grad()
        loss_d = 0
        r1_due = r1_weight > 0 and iteration % R1_INTERVAL == 0
        for domain, d, real, fake, pool in (("a", d_a, a, fake_a, pool_a), ("b", d_b, b, fake_b, pool_b)):
            real = real.clone().requires_grad_(r1_due)
            real_pred, fake_pred = d(real), d(pool.query(fake.detach()))
            loss_d = loss_d + D_WEIGHT * (mse(real_pred, torch.ones_like(real_pred))
                                          + mse(fake_pred, torch.zeros_like(fake_pred)))
            if r1_due:
                (grad,) = torch.autograd.grad(real_pred.mean(dim=(1, 2, 3)).sum(), real, create_graph=True)
                penalty = r1_weight / 2 * R1_INTERVAL * grad.pow(2).sum(dim=(1, 2, 3)).mean()
                penalties[iteration, domain] = penalty.detach()
                loss_d = loss_d + penalty
        loss_d.backward()
        opt_d.step()
    return (pool_a, pool_b), penalties


@pytest.mark.parametrize("threads, r1_weight", [(1, 0.0), (2, 0.0), (1, R1_WEIGHT)], ids=["1", "2", "r1"])
def test_iterations_equal_a_hand_written_cyclegan(threads, r1_weight):
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.manual_seed(3)
        nets = [generator(), generator(), discriminator(), discriminator()]
        reference_nets = copy.deepcopy(nets)
        task = CycleGANTask(*nets, cycle_weight=CYCLE, identity_weight=IDENTITY, d_weight=D_WEIGHT,
                            pool_size=POOL_SIZE, r1_weight=r1_weight, r1_interval=R1_INTERVAL)
        adam = {"type": "Adam", "lr": 1e-2, "betas": [0.5, 0.999]}
        optim = build_optimizers({"optimizers": {
            "generators": {**adam, "params": ["generator_ab", "generator_ba"]},
            "discriminators": {**adam, "params": ["discriminator_a", "discriminator_b"]}}}, task, max_iters=10)
        logged = []
        for batch in batches():
            logged.append(task.train_iteration([batch], optim))
            optim.end_iteration()
        pools, penalties = reference_run(reference_nets, seed=3, r1_weight=r1_weight)
    finally:
        torch.set_num_threads(previous)
    assert {"loss_g_ab", "loss_g_ba", "loss_cycle_a", "loss_cycle_b", "loss_idt_a", "loss_idt_b", "loss_d_a",
            "loss_d_b", "d_real_logit_a", "fake_spread_b"} <= set(logged[-1])
    for iteration, logs in enumerate(logged, start=1):  # the R1 terms logged on the due steps only
        r1_logs = {key: value for key, value in logs.items() if key.startswith("loss_d_r1_")}
        expected = {f"loss_d_r1_{domain}": penalties[iteration, domain]
                    for domain in "ab" if (iteration, domain) in penalties}
        assert r1_logs.keys() == expected.keys(), iteration
        for key, value in expected.items():
            torch.testing.assert_close(r1_logs[key], value, atol=1e-7, rtol=1e-5, msg=named(f"{key} at {iteration}"))
    assert bool(penalties) == bool(r1_weight) and task.uses_double_backward == bool(r1_weight)
    # Largest difference measured: 3.0e-8 at 1 and at 2 threads (fused vs foreach Adam, order of sums).
    for name, net, reference in zip(("generator_ab", "generator_ba", "discriminator_a", "discriminator_b"),
                                    nets, reference_nets):
        for (key, actual), expected in zip(net.state_dict().items(), reference.state_dict().values()):
            torch.testing.assert_close(actual, expected, atol=1e-6, rtol=0, msg=named(f"{name}.{key}"))
    for pool, reference in zip((task.pool_a, task.pool_b), pools):
        torch.testing.assert_close(torch.cat(pool.images), torch.cat(reference.images), atol=1e-6, rtol=0)
        assert torch.equal(pool.generator.get_state(), reference.generator.get_state())


def test_the_iteration_count_survives_a_state_dict_round_trip():
    """Lazy R1 is due by the task's iteration count: a restored task must go on counting from the
    saved one (iteration 2 of r1_interval 2 carries the penalty)."""
    def task_and_optim():
        task = CycleGANTask(generator(), generator(), discriminator(), discriminator(), pool_size=POOL_SIZE,
                            r1_weight=R1_WEIGHT, r1_interval=2)
        sgd = {"type": "SGD", "lr": 1e-2}
        optim = build_optimizers({"optimizers": {
            "generators": {**sgd, "params": ["generator_ab", "generator_ba"]},
            "discriminators": {**sgd, "params": ["discriminator_a", "discriminator_b"]}}}, task, max_iters=10)
        return task, optim

    torch.manual_seed(3)
    stream = iter(batches())
    task, optim = task_and_optim()
    first = task.train_iteration([next(stream)], optim)
    assert not any(key.startswith("loss_d_r1_") for key in first)
    restored, restored_optim = task_and_optim()
    restored.load_state_dict(task.state_dict())
    assert restored.adversary_a.d_steps.value == task.adversary_a.d_steps.value == task.adversary_b.d_steps.value == 1
    second = restored.train_iteration([next(stream)], restored_optim)
    assert {"loss_d_r1_a", "loss_d_r1_b"} <= set(second)


def test_pool_state_round_trip_continues_the_same_choices():
    pool = ImagePool(4, seed=11)
    for step in range(3):
        pool.query(torch.full((3, 3, 2, 2), float(step)))
    restored = ImagePool(4, seed=0)
    restored.load_state_dict(pool.state_dict(), torch.device("cpu"))
    for _ in range(5):
        fakes = torch.rand(3, 3, 2, 2)
        assert torch.equal(pool.query(fakes), restored.query(fakes))
    assert torch.equal(torch.cat(pool.images), torch.cat(restored.images))


def test_an_empty_pool_round_trips():
    """A checkpoint before the first D step: nothing stored yet, the generator as seeded."""
    state = ImagePool(4, seed=11).state_dict()
    assert state["images"].numel() == 0
    restored = ImagePool(4, seed=0)
    restored.load_state_dict(state, torch.device("cpu"))
    assert restored.images == []
    fakes = torch.rand(3, 3, 2, 2)
    assert torch.equal(restored.query(fakes), fakes) and len(restored.images) == 3  # stored while filling


def test_linear_decay_is_constant_then_linear_to_zero():
    param = nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=0.2)
    scheduler = LinearDecayLR(optimizer, decay_start=4, max_iters=8)
    lrs = []
    for _ in range(9):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs == pytest.approx([0.2] * 5 + [0.15, 0.1, 0.05, 0.0])
    with pytest.raises(ValueError, match="decay_start < max_iters"):
        LinearDecayLR(optimizer, decay_start=8, max_iters=8)


def test_the_shipped_schedule_is_the_one_it_had_as_an_iteration():
    """The shipped config's `decay_start: 0.5` at its 600 iterations is 8bdca20's `decay_start:
    300`, iteration by iteration (issue 51 item 10 suspected the change: docs/cyclegan.md)."""
    from framework.config import load_config

    cfg = load_config(REPO / "projects/cyclegan/configs/cyclegan_shapes.yaml")
    shipped = cfg.optimizers.generators.scheduler.decay_start
    assert shipped == 0.5 and cfg.train.max_iters == 600

    def lrs(decay_start):
        optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=2e-4)
        scheduler, seen = LinearDecayLR(optimizer, decay_start=decay_start, max_iters=600), []
        for _ in range(600):
            seen.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            scheduler.step()
        return seen

    assert lrs(shipped) == lrs(300) and lrs(shipped) != lrs(301)


# ----------------------------------------------------------------------------- UnpairedImageFolders

def write_images(folder, names, value):
    folder.mkdir(parents=True)
    for i, name in enumerate(names):
        cv2.imwrite(str(folder / f"{name}.png"), np.full((8, 8, 3), value + i, np.uint8))


@pytest.fixture
def unpaired_root(tmp_path):
    write_images(tmp_path / "trainA", [f"a{i}" for i in range(3)], 10)
    write_images(tmp_path / "trainB", [f"b{i}" for i in range(5)], 100)
    write_images(tmp_path / "testA", ["x", "y"], 10)
    write_images(tmp_path / "testB", ["y", "x"], 100)
    return tmp_path


def test_unpaired_folders_draw_b_by_the_sample_seed(unpaired_root):
    data = UnpairedImageFolders(root=str(unpaired_root), split="train")
    assert len(data) == 5 and not data.paired_by_name  # max(|A|, |B|), as the original
    sample = data[(4, 12345)]
    assert sample["name_a"] == "a1" and sample["a"].shape == (3, 8, 8) and sample["a"].dtype == torch.uint8
    assert int(sample["a"][0, 0, 0]) == 11
    assert data[(4, 12345)]["name_b"] == sample["name_b"]  # reproducible from the seed
    drawn = {data[(0, seed)]["name_b"] for seed in range(40)}
    assert drawn == {f"b{i}" for i in range(5)}  # another epoch's seed, another B
    serial = UnpairedImageFolders(root=str(unpaired_root), split="train", serial=True)
    assert [serial[(i, 99)]["name_b"] for i in range(5)] == [f"b{i}" for i in range(5)]


def test_unpaired_folders_pair_test_images_by_name(unpaired_root):
    data = UnpairedImageFolders(root=str(unpaired_root), split="test")
    assert data.paired_by_name
    assert [(data[i]["name_a"], data[i]["name_b"]) for i in range(2)] == [("x", "x"), ("y", "y")]
    explicit = UnpairedImageFolders(dir_a=str(unpaired_root / "trainA"), dir_b=str(unpaired_root / "testB"))
    assert len(explicit) == 3 and not explicit.paired_by_name


def test_each_side_has_its_own_augmentation(unpaired_root):
    data = UnpairedImageFolders(root=str(unpaired_root), split="train", pipeline=[{"type": "HorizontalFlip", "p": 0.5}])
    for folder in ("trainA", "trainB"):  # left half dark, right half bright: a flip shows
        for path in (unpaired_root / folder).iterdir():
            image = np.zeros((8, 8, 3), np.uint8)
            image[:, 4:] = 255
            cv2.imwrite(str(path), image)
    flips = {(int(s["a"][0, 0, 0]) > 0, int(s["b"][0, 0, 0]) > 0) for s in (data[(0, seed)] for seed in range(40))}
    assert flips == {(False, False), (False, True), (True, False), (True, True)}


def test_unpaired_folders_name_the_bad_folder_or_file(unpaired_root):
    with pytest.raises(DataError, match="data folder not found: .*valA"):
        UnpairedImageFolders(root=str(unpaired_root), split="val")
    (unpaired_root / "emptyB").mkdir()
    with pytest.raises(DataError, match="emptyB: no images"):
        UnpairedImageFolders(root=str(unpaired_root), dir_a="trainA", dir_b="emptyB")
    (unpaired_root / "trainA" / "a1.png").write_bytes(b"not a png")
    data = UnpairedImageFolders(root=str(unpaired_root), split="train", serial=True)
    with pytest.raises(DataError, match="a1.png: cannot read image"):
        data[(1, 0)]


class InMemoryUnpaired(UnpairedImageDataset):
    """The subclass contract (names in any order, load_a / load_b): B's names not in A's order."""

    def __init__(self, names_a, names_b, pipeline=(), shape=(4, 4, 3), shape_b=(4, 4, 3), serial=False):
        super().__init__(pipeline, serial)
        self.names_a, self.names_b, self.shape, self.shape_b = names_a, names_b, shape, shape_b

    def load_a(self, index):
        return np.full(self.shape, 10 + index, np.uint8)

    def load_b(self, index):
        return np.full(self.shape_b, 100 + index, np.uint8)


def test_unpaired_data_pairs_by_name_in_evaluation_whatever_the_order():
    data = InMemoryUnpaired(["x", "y", "z"], ["z", "x", "y"])
    assert data.paired_by_name
    samples = [data[i] for i in range(3)]  # evaluation: no seed
    assert [(s["name_a"], s["name_b"]) for s in samples] == [("x", "x"), ("y", "y"), ("z", "z")]
    assert [int(s["b"][0, 0, 0]) for s in samples] == [101, 102, 100]  # B's own images, found by name
    assert set(samples[2]) == {"a", "b", "name_a", "name_b", "index"} and samples[2]["index"] == 2
    training = data[(1, 7)]
    assert training["name_a"] == "y" and training["index"] == 1  # training draws B from the seed instead
    serial = InMemoryUnpaired(["x", "y", "z"], ["z", "x", "y"], serial=True)
    assert [serial[(i, 7)]["name_b"] for i in range(3)] == ["z", "x", "y"]  # serial: B in its own order


def test_unpaired_samples_are_reproducible_from_their_seed_on_both_sides(unpaired_root):
    data = UnpairedImageFolders(root=str(unpaired_root), split="train", pipeline=[{"type": "HorizontalFlip", "p": 0.5}])
    for folder in ("trainA", "trainB"):
        for path in (unpaired_root / folder).iterdir():
            image = np.zeros((8, 8, 3), np.uint8)
            image[:, 4:] = 255
            cv2.imwrite(str(path), image)
    for seed in range(20):
        first, again = data[(seed % 5, seed)], data[(seed % 5, seed)]
        assert torch.equal(first["a"], again["a"]) and torch.equal(first["b"], again["b"])


def test_an_unpaired_image_of_the_wrong_kind_names_its_side():
    with pytest.raises(DataError, match=re.escape("x (A): expected an HxWx3 uint8 image, got uint8 (4, 4)")):
        InMemoryUnpaired(["x"], ["x"], shape=(4, 4))[0]
    with pytest.raises(DataError, match=re.escape("x (B): expected an HxWx3 uint8 image, got uint8 (4, 4, 1)")):
        InMemoryUnpaired(["x"], ["x"], shape_b=(4, 4, 1))[0]


def test_unpaired_folders_refuse_half_given_folders_naming_the_rule(unpaired_root, monkeypatch):
    with pytest.raises(ValueError, match="^" + re.escape(
            "give both dir_a and dir_b, or neither (then root/<split>A and root/<split>B)") + "$"):
        UnpairedImageFolders(root=str(unpaired_root), dir_a="trainA")
    with pytest.raises(ValueError, match="^" + re.escape("give root (with split) or dir_a and dir_b") + "$"):
        UnpairedImageFolders()
    assert len(UnpairedImageFolders(root=str(unpaired_root)).names_b) == 5  # split: train by default
    (unpaired_root / "emptyB").mkdir()
    with pytest.raises(DataError, match=re.escape(
            f"{unpaired_root / 'emptyB'}: no images (looked for .jpg, .jpeg, .png, .bmp, .tif, .tiff)")):
        UnpairedImageFolders(root=str(unpaired_root), dir_a="trainA", dir_b="emptyB")
    monkeypatch.chdir(unpaired_root)  # without root, relative folders are the working directory's
    relative = UnpairedImageFolders(dir_a="trainA", dir_b="trainB")
    assert (relative.dir_a, len(relative.names_b)) == ("trainA", 5)


def test_metrics_with_a_suffix_read_that_direction_and_skip_unpaired_data():
    from framework.metrics.image import PSNR, L1Distance

    real = torch.full((2, 3, 4, 4), 0.5)
    outputs = {"fake": real, "real": real, "fake_ab": real + 0.1, "real_ab": real}
    psnr, l1 = PSNR(suffix="_ab"), L1Distance(suffix="_ab")
    for metric in (psnr, l1):
        metric.update(outputs)
    assert psnr.compute() == {"PSNR_ab": pytest.approx(20.0, abs=1e-4)}
    assert l1.compute() == {"L1_ab": pytest.approx(0.1, abs=1e-6)}

    class Unpaired:
        paired_by_name = False

    skipped = PSNR(suffix="_ab")
    skipped.use_dataset(Unpaired(), "metrics[0]", "data.val.dataset")
    skipped.update({"fake": real, "real": real})  # no fake_ab/real_ab: nothing to compare, no error
    assert skipped.compute() == {}
    with pytest.raises(ValueError, match="no 'fake_ab' and 'real_ab' images"):
        PSNR(suffix="_ab").update({"fake": real, "real": real})
