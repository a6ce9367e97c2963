"""benchmarks/gpu/gpu_check.py, the one command a GPU machine runs: without CUDA it says so in one line,
lists its plan and exits non-zero having written nothing; `--dry-run` prints the plan; with a GPU
(faked here) every step runs within its own budget, a failing or overlong step is recorded and the
next still runs, and the JSON and markdown report hold every step."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from support import REPO

sys.path.insert(0, str(REPO))
from benchmarks.gpu import gpu_check  # noqa: E402

SCRIPT = REPO / "benchmarks/gpu/gpu_check.py"
STEP_NAMES = ["cuda_tests", "amp_gan", "speed", "two_processes"]


def run_script(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": ""})


def test_without_cuda_one_line_the_plan_and_a_non_zero_exit_with_nothing_written(tmp_path):
    out = tmp_path / "report"
    result = run_script(out)
    assert result.returncode == 2, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == gpu_check.NO_CUDA and lines[1] == "It would run:"
    assert [line.split(" ")[1] for line in lines if line[:1].isdigit()] == STEP_NAMES
    assert not out.exists()


def test_dry_run_prints_the_plan_within_eight_minutes():
    result = run_script("--dry-run")
    assert result.returncode == 0, result.stderr
    assert [line.split(" ")[1] for line in result.stdout.splitlines() if line[:1].isdigit()] == STEP_NAMES
    steps = gpu_check.plan(REPO / "out")
    assert [step.name for step in steps] == list(gpu_check.STEP_NAMES)  # what --steps accepts
    assert all(step.budget_s > 0 for step in steps)
    assert sum(step.budget_s for step in steps) <= gpu_check.TOTAL_BUDGET_S == 480
    assert result.stdout.splitlines()[-1] == f"budgets together: {sum(s.budget_s for s in steps)} s of 480"
    for step in steps[1:]:  # the benchmark scripts named exist
        assert (REPO / step.command[1]).is_file(), step.command


def fake_gpu(monkeypatch, steps):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(gpu_check, "machine", lambda: {"date": "today", "gpu": "Fake GPU", "capability": "9.0",
                                                       "torch": torch.__version__, "cuda": "13.0"})
    monkeypatch.setattr(gpu_check, "plan", lambda out: steps(out))


def python(code):
    return [sys.executable, "-c", code]


def test_every_step_runs_in_its_budget_and_failures_are_recorded(monkeypatch, tmp_path):
    speed = {"cases": {"pix2pix": {"amp": {"plain": {"s_per_iter": 0.004, "peak_mb": 100.0},
                                           "framework": {"s_per_iter": 0.0042, "peak_mb": 120.4}, "ratio": 1.05}}}}

    def steps(out):
        write = f"import json, pathlib; pathlib.Path({str(out / 'speed.json')!r}).write_text(json.dumps({speed!r}))"
        return [gpu_check.Step("fails", 30, "exits 1", python("import sys; print('broken'); sys.exit(1)")),
                gpu_check.Step("hangs", 1, "runs past its budget, a child with it",
                               python("import pathlib, subprocess, sys, time; child = subprocess.Popen([sys.executable, "
                                      "'-c', 'import time; time.sleep(60)']); "
                                      f"pathlib.Path({str(out / 'child')!r}).write_text(str(child.pid)); time.sleep(60)")),
                gpu_check.Step("speed", 30, "writes its figures", python(write), "speed.json")]

    fake_gpu(monkeypatch, steps)
    out = tmp_path / "report"
    start = time.monotonic()
    assert gpu_check.main([str(out)]) == 1  # not every step passed
    assert time.monotonic() - start < 25  # the hanging step was stopped at its budget
    report = json.loads((out / "gpu_check.json").read_text())
    assert [(s["name"], s["status"]) for s in report["steps"]] == [("fails", "failed"), ("hangs", "timed out"),
                                                                   ("speed", "passed")]
    assert report["steps"][0]["exit_code"] == 1 and "broken" in report["steps"][0]["tail"]
    child = int((out / "child").read_text())
    time.sleep(0.5)  # SIGKILL delivered; the child, reparented, is reaped by init
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]
    assert report["steps"][2]["result"] == speed
    table = (out / "gpu_check.md").read_text()
    assert "| hangs | timed out |" in table and "| fails | failed |" in table
    assert "| pix2pix | amp | 4.00 | 4.20 | x1.050 | 100 | 120 |" in table
    assert (out / "fails.log").read_text() == "broken\n"


def test_all_steps_passing_exit_zero(monkeypatch, tmp_path):
    fake_gpu(monkeypatch, lambda out: [gpu_check.Step("ok", 30, "passes", python("pass"))])
    assert gpu_check.main([str(tmp_path)]) == 0
    assert json.loads((tmp_path / "gpu_check.json").read_text())["steps"][0]["status"] == "passed"


@pytest.mark.parametrize("result, row", [
    ({"checks": {"pix2pix overflow": {"ok": True, "seconds": 3.0}}}, '| pix2pix overflow | yes | `{"seconds": 3.0}` |'),
    ({"ddp": {"ok": False, "backend": "gloo"}}, '| ddp | NO | `{"backend": "gloo"}` |'),
])
def test_check_tables_say_which_failed(result, row):
    assert row in gpu_check.check_rows(result)


SMALL_PIX2PIX = ["task.generator.num_downs=5", "task.generator.base_channels=8", "task.discriminator.base_channels=8",
                 "data.train.dataset.size=32", "data.train.dataset.num_samples=16", "data.train.batch_size=4",
                 "data.val.dataset.size=32", "data.val.dataset.num_samples=8", "data.train.num_workers=0"]


def test_the_amp_step_on_the_cpu_an_overflow_skips_only_its_optimizers_step(tmp_path):
    """The `amp_gan` step's overflow check, float16 with a GradScaler on the CPU: an infinite
    gradient planted in G's parameters skips G's step and not D's, and the other way round."""
    from benchmarks.gpu import gpu_amp_gan

    out = tmp_path / "amp_gan.json"
    status = gpu_amp_gan.main(["--device", "cpu", "--tasks", "pix2pix", "--checks", "overflow", "--json", str(out),
                               *SMALL_PIX2PIX])
    checks = json.loads(out.read_text())["checks"]
    assert list(checks) == ["pix2pix overflow"]
    per_optimizer = checks["pix2pix overflow"]["optimizers"]
    assert set(per_optimizer) == {"generator", "discriminator"}
    for figures in per_optimizer.values():
        assert figures == {"skipped": True, "others_stepped": True, "scale_halved": True, "finite_after": True,
                           "ok": True}
    assert status == 0


def test_the_speed_step_on_the_cpu_writes_its_figures(tmp_path):
    from benchmarks.gpu import gpu_speed

    out = tmp_path / "speed.json"
    gpu_speed.main(["--device", "cpu", "--cases", "pix2pix", "--variants", "float32", "--block", "1", "--rounds", "1",
                    "--images", "16", "--json", str(out)])
    row = json.loads(out.read_text())["cases"]["pix2pix"]["float32"]
    assert row["plain"]["s_per_iter"] > 0 and row["framework"]["s_per_iter"] > 0
    assert row["ratio"] == row["framework"]["s_per_iter"] / row["plain"]["s_per_iter"]
    assert row["framework"]["precision"] == "float32" and row["plain"]["peak_mb"] is None  # CUDA only
    assert f"| pix2pix | float32 | {row['plain']['s_per_iter'] * 1e3:.2f} |" in "\n".join(
        gpu_check.speed_rows(json.loads(out.read_text())))


def test_two_ranks_stop_at_the_first_failing_rank(tmp_path):
    """NCCL refusing a second rank on one GPU fails one rank and leaves the other in a collective:
    the attempt ends there, not at its timeout, and the fallback (gloo) gets the time."""
    from benchmarks.gpu.gpu_two_processes import run_ranks

    rank_fails = python("import os, sys, time; time.sleep(60) if os.environ['RANK'] == '0' else sys.exit(3)")
    start = time.monotonic()
    assert run_ranks(rank_fails, 2, timeout=60, log=tmp_path / "attempt") is False
    assert time.monotonic() - start < 20
    both_pass = python("import os; print(os.environ['RANK'], os.environ['LOCAL_RANK'], os.environ['WORLD_SIZE'])")
    assert run_ranks(both_pass, 2, timeout=60, log=tmp_path / "ok") is True
    # every rank on the one GPU: LOCAL_RANK 0 for both
    assert [(tmp_path / f"ok.rank{r}.log").read_text() for r in (0, 1)] == ["0 0 2\n", "1 0 2\n"]
