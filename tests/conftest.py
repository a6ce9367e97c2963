"""Session fixtures: one tiny model of each kind, trained once and shared by the tool tests; and,
under mutmut only, the config schema rebuilt per test (`_schema_built_by_the_mutant`)."""

import importlib
import logging
import os
import sys

import pytest
import tolerance_guard

from support import REPO, call_tool

SEGMENTATION_CONFIG = REPO / "configs/segmentation/unet_shapes.yaml"
PIX2PIX_CONFIG = REPO / "projects/pix2pix/configs/pix2pix_shapes.yaml"

# A UNet of depth 2 (sides padded to multiples of 4) on 32x32 shapes, 4 iterations.
TINY_UNET_RUN = [
    "device=cpu", "task.model.base_channels=8", "task.model.depth=2", "train.max_iters=4",
    "train.val_interval=4", "train.ckpt_interval=4", "train.log_interval=2", "data.train.dataset.size=32",
    "data.train.dataset.num_samples=16", "data.train.batch_size=4", "data.train.num_workers=0",
    "data.val.dataset.size=32", "data.val.dataset.num_samples=8", "data.val.batch_size=8",
]
TINY_PIX2PIX_RUN = [
    "device=cpu", "train.max_iters=2", "train.val_interval=2", "train.val_at_start=false",
    "train.ckpt_interval=2", "train.log_interval=1", "data.train.dataset.num_samples=8",
    "data.train.dataset.size=32", "data.train.batch_size=4", "data.val.dataset.num_samples=4",
    "data.val.dataset.size=32", "data.val.batch_size=4", "task.generator.num_downs=3",
    "task.generator.base_channels=8", "task.discriminator.base_channels=8", "+task.ema_decay=0.9",
]
DCGAN_CONFIG = REPO / "projects/dcgan/configs/dcgan_shapes.yaml"
TINY_DCGAN_RUN = [
    "device=cpu", "train.max_iters=2", "train.val_interval=0", "train.ckpt_interval=2", "train.log_interval=1",
    "data.train.dataset.num_samples=8", "data.train.batch_size=4", "data.train.num_workers=0",
    "task.generator.base_channels=8", "task.discriminator.base_channels=8", "task.num_fixed_samples=4",
    "task.ema_start=0",
]


class Run:
    """A finished run: its resolved config (work_dir/config.yaml) and its last checkpoint."""

    def __init__(self, work_dir):
        self.work_dir = work_dir
        self.config = work_dir / "config.yaml"
        self.checkpoint = work_dir / "checkpoints" / (work_dir / "checkpoints" / "latest").read_text().strip()

    def args(self):
        return ["--config", self.config, "--checkpoint", self.checkpoint]


def _train(tmp_path_factory, name, config, overrides) -> Run:
    work_dir = tmp_path_factory.mktemp(name)
    result = call_tool("train", "--config", config, "--work-dir", work_dir, *overrides)
    assert result.returncode == 0, result.stderr
    return Run(work_dir)


@pytest.fixture(scope="session")
def unet_run(tmp_path_factory) -> Run:
    return _train(tmp_path_factory, "unet", SEGMENTATION_CONFIG, TINY_UNET_RUN)


@pytest.fixture(scope="session")
def pix2pix_run(tmp_path_factory) -> Run:
    return _train(tmp_path_factory, "pix2pix", PIX2PIX_CONFIG, TINY_PIX2PIX_RUN)


@pytest.fixture(scope="session")
def dcgan_run(tmp_path_factory) -> Run:
    return _train(tmp_path_factory, "dcgan", DCGAN_CONFIG, TINY_DCGAN_RUN)


@pytest.fixture
def framework_log(caplog):
    """caplog holding the `framework` logger's records from INFO up: that logger does not propagate
    to pytest's root handler once a tool in this process has set up logging (runtime/cli.py)."""
    logger = logging.getLogger("framework")
    caplog.set_level(logging.INFO, logger="framework")
    propagate, logger.propagate = logger.propagate, False  # each record once, through caplog's handler
    logger.addHandler(caplog.handler)
    yield caplog
    logger.removeHandler(caplog.handler)
    logger.propagate = propagate


@pytest.fixture(autouse=True)
def _schema_built_by_the_mutant():
    """Under mutmut's run of framework/config/rules.py only: the config schema rebuilt before each
    test, so that its rules were made by the mutated constructors.

    `SCHEMA` (framework/config/schema.py) is built at import by `integer(...)`, `section(...)`...
    mutmut 3 imports it in its parent process and switches a mutant on (MUTANT_UNDER_TEST, read
    at each call) only in the forked worker, so without this no mutant of a constructor would run.
    schema.py is reloaded (the constructors run again, now the mutant's) and every module that
    imported one of its objects (`from framework.config.schema import SCHEMA`: loading.py, the
    tests) gets the new one. Per test, so that mutmut's stats pass links every test to the
    constructors. Nothing happens outside mutmut, or when rules.py is not the mutated module.
    """
    if os.environ.get("MUTANT_UNDER_TEST") and _rules_are_mutated():
        _rebuild_schema()
    yield


def _rules_are_mutated() -> bool:
    from framework.config import rules
    return hasattr(rules, "x_integer__mutmut_orig")  # mutmut 3's copy of the original function


def _rebuild_schema() -> None:
    from framework.config import schema
    old = dict(vars(schema))
    importlib.reload(schema)
    new = {id(value): vars(schema)[name] for name, value in old.items()
           if not name.startswith("__") and vars(schema).get(name) is not value}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for module in list(sys.modules.values()):
        if module is schema or not (getattr(module, "__file__", None) or "").startswith(root):
            continue
        namespace = vars(module)
        for name, value in list(namespace.items()):
            if id(value) in new:  # `old` keeps the old objects alive: their ids are theirs alone
                namespace[name] = new[id(value)]


def pytest_configure(config):
    """Under pytest-xdist (pytest.ini runs one worker per core), each worker's torch gets its
    share of the cores: more threads than cores keep OpenMP threads spinning against the other
    workers' (a tiny run became 7x slower beside the suite on 2 cores). And comparisons that
    cannot fail are refused (tests/tolerance_guard.py)."""
    tolerance_guard.install()
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers:
        import torch
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        threads = max(1, cores // workers)  # the cores this process may run on (taskset)
        torch.set_num_threads(threads)
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))  # what `threads: auto` of in-process runs keeps


def pytest_collection_finish(session):
    """What every worker keeps to the end (torch, torch._dynamo that deterministic runs import,
    the framework and the collected test modules) moved out of the collector's sight, as a tool's
    start-up does (framework/runtime/cli.py): each in-process run ends with a full collection
    (run_training), which otherwise walks these ~400k objects, 0.25 s a run, minutes a suite."""
    import gc

    import torch._dynamo  # noqa: F401

    gc.collect()
    gc.freeze()


def pytest_collection_modifyitems(config, items):
    """Tests marked `cuda` are skipped on a machine without a CUDA device (CI's)."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if item.get_closest_marker("cuda"):
            item.add_marker(skip)
