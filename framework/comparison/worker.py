"""`tools/compare.py --launcher worker`: any number of processes, on any machines that share the
work dir, run the same command and share out the runs.

A worker claims a run by creating `<name>/seed<S>.claim` with O_CREAT|O_EXCL (atomic on a local
filesystem and on NFSv3+), holding its host, its pid and then its training process's pid; it runs
the pair as the local runner does (resuming from checkpoints where the run dir has them),
touches the claim every quarter of `stale_seconds`, at most every 30 s (the heartbeat), and removes the claim when the run ends.
Then it takes the next. A claim whose holder is gone is taken over: on the same host when
neither the worker nor its training process is alive; from another host when the heartbeat
is older than `stale_seconds` (clocks of the machines must roughly agree). The worker that
takes over moves the stale claim aside first (a rename only one worker can win) and resumes the
run from its checkpoint: a worker killed with SIGKILL leaves its run to the next one (its
training process got SIGTERM from the kernel and saved, child_process.py).

A worker ends when every run has finished or failed (it waits while others still hold runs, so
it can take one over if they die); each writes the report. A run that failed after this worker
started is not tried again by it; rerunning the command tries it again.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

from framework.checkpoint.files import process_alive
from framework.comparison.plan import Pair, Plan
from framework.comparison.runner import STOPPED_STATUSES, Outcome, _StopSignals, outcome_of, start_run
from framework.comparison.status import current_outcomes

HOST = socket.gethostname()
# /proc/mounts types whose files other machines see too
SHARED_FILESYSTEMS = ("nfs", "nfs4", "lustre", "gpfs", "beegfs", "cephfs", "ceph", "glusterfs", "fuse.glusterfs",
                      "cifs", "smb3", "fuse.sshfs", "9p", "wekafs", "panfs", "fuse.juicefs", "fuse.s3fs")


def claim_path(pair: Pair) -> Path:
    return pair.folder / f"seed{pair.seed}.claim"


def filesystem_of(path: Path) -> tuple[str, str] | None:
    """(type, mount point) of the filesystem holding `path`, from /proc/mounts (None elsewhere)."""
    try:
        mounts = [line.split()[1:3] for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return None
    resolved = str(path.resolve())
    found = [(point, kind) for point, kind in mounts if resolved == point or resolved.startswith(point.rstrip("/") + "/")]
    if not found:
        return None
    point, kind = max(found, key=lambda item: len(item[0]))
    return kind, point


def sharing_note(work_dir: Path) -> str:
    found = filesystem_of(work_dir)
    if found is None:
        return f"worker on {HOST}: could not tell whether {work_dir} is on a shared filesystem (no /proc/mounts)"
    kind, point = found
    if kind in SHARED_FILESYSTEMS:
        return f"worker on {HOST}: {work_dir} is on {kind} ({point}), shared with other machines"
    return (f"worker on {HOST}: {work_dir} is on {kind} ({point}, from /proc/mounts), a filesystem of this machine "
            "only: workers on other machines would not see these runs (workers on this machine share them)")


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None


def stale_reason(path: Path, holder: dict | None, stale_seconds: float) -> str | None:
    """Why the claim's holder is gone, or None while it may still be working."""
    try:
        age = time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return None
    if holder and holder.get("host") == HOST:
        pids = [holder.get("pid"), holder.get("run_pid")]
        if not any(isinstance(pid, int) and process_alive(pid) for pid in pids):
            return f"its worker (pid {holder.get('pid')}) and training process on {HOST} are gone"
        return None
    if age > stale_seconds:
        return f"no heartbeat from {(holder or {}).get('host', 'its worker')} for {age / 60:.1f} min"
    return None


def _write_claim(path: Path, run_pid: int | None = None) -> None:
    temp = path.with_name(f"{path.name}.{HOST}.{os.getpid()}.tmp")
    temp.write_text(json.dumps({"host": HOST, "pid": os.getpid(), "run_pid": run_pid}) + "\n", encoding="utf-8")
    os.replace(temp, path)


def try_claim(pair: Pair, stale_seconds: float, say) -> bool:
    path = claim_path(pair)
    pair.folder.mkdir(parents=True, exist_ok=True)
    for _ in range(2):  # a second try after moving a stale claim aside
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            holder = _read(path)
            why = stale_reason(path, holder, stale_seconds)
            if why is None:
                return False
            aside = path.with_name(f"{path.name}.stale-{HOST}-{os.getpid()}")
            try:
                os.rename(path, aside)  # of several workers taking over, one rename wins
            except FileNotFoundError:
                return False
            if _read(aside) != holder:  # a fresh claim replaced the stale one since it was read: put it back
                try:
                    os.link(aside, path)
                finally:
                    os.unlink(aside)
                return False
            os.unlink(aside)
            say(f"{pair.name} seed {pair.seed}: taking over ({why})")
            continue
        _write_claim(path)
        return True
    return False


def _failed_since(pair: Pair, since: float) -> bool:
    """The pair failed (not stopped) after `since`: not tried again by this worker."""
    record = pair.record() or {}
    returncode = record.get("returncode")
    if returncode in (None, 0) or returncode in STOPPED_STATUSES:
        return False
    try:
        return pair.record_path.stat().st_mtime >= since
    except FileNotFoundError:
        return False


def _run_claimed(plan: Plan, train: list[str], pair: Pair, stop: _StopSignals, heartbeat_seconds: float, say) -> Outcome:
    resume = pair.state() == "resume"
    process = start_run(train, plan, pair, resume, plan.core_sets[0])
    _write_claim(claim_path(pair), process.pid)
    say(f"{pair.name} seed {pair.seed}: {'resumed' if resume else 'started'} by {HOST} pid {os.getpid()}")
    beating = threading.Event()

    def beat() -> None:
        while not beating.wait(heartbeat_seconds):
            try:
                os.utime(claim_path(pair))
            except FileNotFoundError:
                return

    threading.Thread(target=beat, daemon=True).start()
    passed, started = 0, time.monotonic()
    try:
        while process.poll() is None:
            passed = stop.pass_on(process, passed)
            time.sleep(0.2)
    finally:
        beating.set()
    outcome = outcome_of(pair, process.returncode, stopping=bool(stop.received))
    pair.write_record(process.returncode, outcome.error)
    claim_path(pair).unlink(missing_ok=True)
    say(f"{pair.name} seed {pair.seed}: {outcome.status} after {time.monotonic() - started:.0f} s"
        + (f": {outcome.error}" if outcome.error else ""))
    return outcome


def run_as_worker(plan: Plan, train: list[str], stale_seconds: float, say=print,
                  poll_seconds: float = 1.0) -> tuple[list[Outcome], int | None]:
    """Claim and run pairs until none is left to run; (every pair's outcome, the stop signal or None)."""
    say(sharing_note(plan.work_dir))
    since = time.time()
    heartbeat_seconds = max(1.0, min(30.0, stale_seconds / 4))
    order = sorted(plan.pairs, key=lambda p: plan.seeds.index(p.seed))
    with _StopSignals() as stop:
        while not stop.received:
            open_pairs = [p for p in order if p.state() != "finished" and not _failed_since(p, since)]
            if not open_pairs:
                break
            claimed = next((p for p in open_pairs if try_claim(p, stale_seconds, say)), None)
            if claimed is None:  # the rest are held by other workers: wait for them, or for them to go stale
                time.sleep(poll_seconds)
                continue
            _run_claimed(plan, train, claimed, stop, heartbeat_seconds, say)
        received = stop.received[0] if stop.received else None
    return current_outcomes(plan), received
