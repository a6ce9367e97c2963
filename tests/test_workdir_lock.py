"""The work-dir claim (framework/runtime/workdir.py) called directly, with real processes and files:
the lock's content and removal, busy/stale/foreign/unreadable locks, a folder holding a run,
--overwrite, and the other ranks writing nothing. (End to end through tools/train.py:
tests/test_workdir.py.)"""

import json
import os
import socket
import subprocess
import sys

import pytest

from framework.checkpoint.run_folder import run_checkpoints as run_files
from framework.errors import ConfigError
from framework.runtime.workdir import LOCK_FILE, claim_work_dir, leftover_files


def lock_of(pid, host=None):
    return json.dumps({"pid": pid, "host": host or socket.gethostname(), "started": "2026-01-01T00:00:00"})


@pytest.fixture
def dead_pid():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


@pytest.fixture
def live_pid():
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process.pid
    process.kill()
    process.wait()


def test_the_lock_names_this_process_while_the_block_runs_and_is_removed_after(tmp_path):
    work_dir = tmp_path / "a" / "wd"
    with claim_work_dir(work_dir, resuming=False):
        owner = json.loads((work_dir / LOCK_FILE).read_text())
        assert owner["pid"] == os.getpid() and owner["host"] == socket.gethostname() and owner["started"]
        with claim_work_dir(work_dir, resuming=True):  # the same process may claim again (nested)
            pass
    assert list(work_dir.iterdir()) == []


def test_other_ranks_write_nothing(tmp_path):
    with claim_work_dir(tmp_path / "wd", resuming=False, main_process=False):
        assert not (tmp_path / "wd").exists()


def test_a_live_run_refuses_and_a_dead_ones_lock_is_taken_over(tmp_path, live_pid, dead_pid, framework_log):
    work_dir = tmp_path / "wd"
    work_dir.mkdir()
    (work_dir / LOCK_FILE).write_text(lock_of(live_pid))
    with pytest.raises(ConfigError, match=rf"^work dir {work_dir} is in use by another run \(pid {live_pid}, "
                                          r"since 2026-01-01T00:00:00\)$"):
        with claim_work_dir(work_dir, resuming=True):
            pass
    (work_dir / LOCK_FILE).write_text(lock_of(dead_pid))
    with claim_work_dir(work_dir, resuming=True):
        assert json.loads((work_dir / LOCK_FILE).read_text())["pid"] == os.getpid()
    assert f"removed a stale lock in {work_dir} (its process is gone)" in framework_log.text


def test_a_lock_from_another_host_refuses_naming_the_file(tmp_path):
    work_dir = tmp_path / "wd"
    work_dir.mkdir()
    (work_dir / LOCK_FILE).write_text(lock_of(1, host="elsewhere"))
    with pytest.raises(ConfigError) as raised:
        with claim_work_dir(work_dir, resuming=True):
            pass
    assert str(raised.value) == (f"work dir {work_dir} is in use by pid 1 on host elsewhere (since 2026-01-01T00:00:00); "
                                 f"if that run is gone, delete {work_dir / LOCK_FILE}")


@pytest.mark.parametrize("content", ["{", '{"host": "x"}', '{"pid": "abc", "host": "x"}', "[]"])
def test_a_half_written_lock_is_stale(tmp_path, content):
    work_dir = tmp_path / "wd"
    work_dir.mkdir()
    (work_dir / LOCK_FILE).write_text(content)
    with claim_work_dir(work_dir, resuming=True):
        assert json.loads((work_dir / LOCK_FILE).read_text())["pid"] == os.getpid()


def make_run(work_dir, *files):
    for name in files:
        (work_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (work_dir / name).write_text("x")


def test_a_run_is_its_checkpoints_and_records_without_one_are_leftovers(tmp_path):
    assert run_files(tmp_path) == [] and leftover_files(tmp_path) == []
    make_run(tmp_path, "config.yaml", "checkpoints/notes.txt", "tensorboard/other")
    assert run_files(tmp_path) == [] and leftover_files(tmp_path) == []
    make_run(tmp_path, "metrics.jsonl", "tensorboard/events.out.tfevents.1")
    assert run_files(tmp_path) == [] and leftover_files(tmp_path) == ["metrics.jsonl", "tensorboard events"]
    make_run(tmp_path, *(f"checkpoints/iter_{i}.pth" for i in (2, 4, 6, 8)))
    assert run_files(tmp_path) == ["iter_2.pth", "iter_4.pth", "iter_6.pth"]


def test_the_untrained_start_alone_is_no_run_but_a_leftover(tmp_path):
    """iter_0.pth (saved before the first iteration) shows no run; with iter_1.pth, the first
    trained checkpoint, the folder holds one and iter_0.pth is no leftover."""
    make_run(tmp_path, "checkpoints/iter_0.pth", "checkpoints/latest", "metrics.jsonl")
    assert run_files(tmp_path) == []
    assert leftover_files(tmp_path) == ["checkpoints/iter_0.pth (the untrained start)", "metrics.jsonl"]
    make_run(tmp_path, "checkpoints/iter_1.pth")
    assert run_files(tmp_path) == ["iter_1.pth"]
    assert leftover_files(tmp_path) == ["metrics.jsonl"]


def test_a_folder_whose_only_checkpoint_is_the_untrained_start_is_moved_aside(tmp_path):
    work_dir = tmp_path / "wd"
    make_run(work_dir, "checkpoints/iter_0.pth", "checkpoints/latest")
    with claim_work_dir(work_dir, resuming=False) as notices:
        assert sorted(p.name for p in work_dir.iterdir()) == [LOCK_FILE]
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("wd.old-")]
    assert len(aside) == 1 and (aside[0] / "checkpoints/iter_0.pth").read_text() == "x"
    assert notices == [f"moved checkpoints/iter_0.pth (the untrained start) of a run without a trained checkpoint "
                       f"in {work_dir} to {aside[0]}"]


def test_a_folder_holding_a_run_is_refused_unless_resumed_or_overwritten(tmp_path, framework_log):
    work_dir = tmp_path / "wd"
    make_run(work_dir, "checkpoints/iter_2.pth", "metrics.jsonl")
    with pytest.raises(ConfigError) as raised:
        with claim_work_dir(work_dir, resuming=False):
            pass
    assert str(raised.value) == (f"work dir {work_dir} holds a run (iter_2.pth): continue it with --resume, "
                                 "start a new one with another --work-dir, or pass --overwrite to move the old run aside")
    assert not (work_dir / LOCK_FILE).exists()
    with claim_work_dir(work_dir, resuming=True):
        assert (work_dir / "metrics.jsonl").exists()
    with claim_work_dir(work_dir, resuming=False, overwrite=True):
        assert sorted(p.name for p in work_dir.iterdir()) == [LOCK_FILE]
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("wd.old-")]
    assert len(aside) == 1 and (aside[0] / "metrics.jsonl").read_text() == "x" and (aside[0] / "checkpoints").is_dir()
    assert f"--overwrite: moved the previous run in {work_dir} to {aside[0]}" in framework_log.text
    with claim_work_dir(tmp_path / "empty", resuming=False, overwrite=True):  # nothing to move
        pass
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("empty")] == ["empty"]


def test_a_busy_folder_is_refused_before_overwrite_moves_it(tmp_path, live_pid):
    work_dir = tmp_path / "wd"
    make_run(work_dir, "metrics.jsonl")
    (work_dir / LOCK_FILE).write_text(lock_of(live_pid))
    with pytest.raises(ConfigError, match="is in use by another run"):
        with claim_work_dir(work_dir, resuming=False, overwrite=True):
            pass
    assert (work_dir / "metrics.jsonl").exists() and [p.name for p in tmp_path.iterdir()] == ["wd"]


def test_a_work_dir_that_cannot_be_created_is_an_os_error_naming_it(tmp_path):
    """An OSError naming the folder: the tools print `error: <path>: <cause>` and exit 1."""
    (tmp_path / "file").write_text("x")
    with pytest.raises(OSError) as raised:
        with claim_work_dir(tmp_path / "file" / "wd", resuming=False):
            pass
    assert raised.value.filename == str(tmp_path / "file" / "wd") and raised.value.strerror == "Not a directory"


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
def test_a_folder_where_no_file_can_be_created_is_an_os_error_naming_the_file():
    """/proc/self exists (so no mkdir error) but refuses new files, for root too."""
    with pytest.raises(OSError) as raised:
        with claim_work_dir("/proc/self", resuming=True):
            pass
    assert raised.value.filename == f"/proc/self/{LOCK_FILE}" and raised.value.strerror == "No such file or directory"
