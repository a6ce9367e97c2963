"""The training loop's per-iteration cost beyond a hand-written loop, counted (not timed, so the test
holds on a loaded machine): the tensor operations the framework's Trainer adds per iteration on the
near-zero-compute networks of benchmarks/release/fixed_cost.py (benchmarks/studies/step_profile.py prints them all).

No host sync per iteration (`aten._local_scalar_dense`: `.item()`, `float(t)`, `bool(t)`) outside the
log interval, except the one the CPU's cross-entropy reads by design (losses/segmentation.py
`_nll_mean`: free on the CPU, no device to wait for; never on a GPU)."""

import pytest
import torch

from benchmarks.studies.step_profile import CASES, aten_ops

SYNC = "aten._local_scalar_dense.default"
STEPS = 100  # two log iterations (interval 50): their reads are 0.02 per iteration each


@pytest.fixture(scope="module")
def added_ops(tmp_path_factory):
    torch.set_num_threads(1)
    added = {}
    for name, case in CASES.items():
        handwritten, framework = case(str(tmp_path_factory.mktemp(name)))
        handwritten(10), framework(10)
        ours, theirs = aten_ops(framework, STEPS), aten_ops(handwritten, STEPS)
        added[name] = {op: ours[op] - theirs[op] for op in set(ours) | set(theirs)}
    return added


def test_a_gan_iteration_adds_no_host_sync(added_ops):
    assert added_ops["gan"].get(SYNC, 0) < 0.5


def test_a_segmentation_iteration_adds_only_the_cpu_cross_entropy_read(added_ops):
    assert added_ops["segmentation"][SYNC] == pytest.approx(1, abs=0.1)


@pytest.mark.parametrize("case, most", [("segmentation", 3), ("gan", 12)])
def test_the_trainer_adds_few_tensor_operations_per_iteration(added_ops, case, most):
    """Measured 2026-11-27: segmentation +2.5 (the read above, the logged loss's detach, the log
    interval's stacks and norms), GAN +11.4 (detached logs and the adversarial loss's scaling)."""
    assert sum(added_ops[case].values()) <= most, sorted(added_ops[case].items(), key=lambda kv: -kv[1])[:8]
