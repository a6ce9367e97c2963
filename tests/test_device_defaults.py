"""The defaults that depend on the device, decided for a CUDA run with the GPU faked where none is
present: loader worker processes sized to the cores, pinned memory, persistent workers, cuDNN's
algorithm search (off when the run is deterministic), and the log lines that say what was chosen.
What only a real GPU shows (pinned batches, the search itself) is in tests/test_cuda.py."""

import logging
import os

import pytest
import torch

from framework.data.loader import build_dataloader, describe_loader
from framework.engine.build import cudnn_benchmark, log_device_defaults

GPU, CPU = torch.device("cuda", 0), torch.device("cpu")
SECTION = {"dataset": {"type": "SyntheticShapes", "num_samples": 8, "size": 16}, "batch_size": 4}


def loader_on(monkeypatch, device, cores, **section):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    return build_dataloader({**SECTION, **section}, "data.train", train=True, device=device)


@pytest.mark.parametrize("cores, workers", [(2, 1), (8, 7), (9, 8), (16, 8)])  # all but one core, at most 8
def test_a_cuda_run_gets_workers_pinned_memory_and_persistent_workers(monkeypatch, cores, workers):
    loader = loader_on(monkeypatch, GPU, cores)
    assert (loader.num_workers, loader.pin_memory, loader.persistent_workers) == (workers, True, True)
    assert describe_loader(loader, SECTION, "data.train") == (
        f"data.train: {workers} worker process{'es' if workers > 1 else ''} (num_workers: auto), pinned memory "
        "(pin_memory: auto), persistent workers, decoded samples cached")


@pytest.mark.parametrize("cores, cache, workers", [(16, "auto", 0), (4, None, 0), (5, None, 1), (16, None, 4)])
def test_a_cpu_run_leaves_the_cores_to_compute(monkeypatch, cores, cache, workers):
    """On the CPU the training threads use every core: workers only for uncached data on more than 4."""
    loader = loader_on(monkeypatch, CPU, cores, cache=cache)
    assert (loader.num_workers, loader.pin_memory) == (workers, False)
    assert loader.persistent_workers is (workers > 0)


def test_explicit_loader_settings_are_kept_on_cuda_and_the_line_does_not_call_them_auto(monkeypatch):
    section = {"num_workers": 2, "pin_memory": False, "persistent_workers": False, "cache": None}
    loader = loader_on(monkeypatch, GPU, 16, **section)
    assert (loader.num_workers, loader.pin_memory, loader.persistent_workers) == (2, False, False)
    assert describe_loader(loader, {**SECTION, **section}, "data.train") == (
        "data.train: 2 worker processes, memory not pinned, workers not persistent, samples read per access")


@pytest.mark.parametrize("deterministic, setting, expected", [
    (False, True, True), (True, True, False), ("warn", True, False), (False, False, False),
])
def test_cudnn_benchmark_is_on_unless_the_run_is_deterministic(deterministic, setting, expected):
    assert cudnn_benchmark({"cudnn_benchmark": setting, "deterministic": deterministic}) is expected


class Lines(logging.Handler):
    """The framework logger's lines, whatever an earlier in-process tool run did to its propagation."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def logged(call) -> list[str]:
    framework_logger, handler = logging.getLogger("framework"), Lines()
    level = framework_logger.level
    framework_logger.addHandler(handler)
    framework_logger.setLevel(logging.INFO)
    try:
        call()
    finally:
        framework_logger.removeHandler(handler)
        framework_logger.setLevel(level)
    return handler.lines


@pytest.mark.parametrize("deterministic, line", [(False, "cudnn.benchmark on"),
                                                 ("warn", "cudnn.benchmark off (deterministic)")])
def test_a_cuda_run_logs_what_its_defaults_came_to(monkeypatch, deterministic, line):
    loader = loader_on(monkeypatch, GPU, 16)
    config = {"cudnn_benchmark": True, "deterministic": deterministic, "data": {"train": SECTION}}
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", cudnn_benchmark(config))
    loader_line = describe_loader(loader, SECTION, "data.train")
    assert logged(lambda: log_device_defaults(config, GPU, loader)) == [loader_line, line]
    # cuDNN is not named where it does nothing
    assert logged(lambda: log_device_defaults(config, CPU, loader)) == [loader_line]
