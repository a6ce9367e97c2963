"""Joining the group: the launch variables checked at once, then a start-up barrier in bounded time.

What can be known before any process waits is checked first, each mistake one line naming the
variable (`check_launch_environment`): RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and
MASTER_PORT numbers in range, MASTER_ADDR set and resolvable. Slurm's own variables are
checked in `slurm.py` before they become these.

What cannot be known at once is whether every rank comes. torch's rendezvous would wait the
whole `dist.timeout` (30 minutes by default) and then end in pages of c10d messages. Here rank 0
(or torchrun's agent) hosts the store; every rank writes `startup/rank<r>` there, and rank 0
waits at most `dist.startup_timeout` for all of them, then writes its verdict (`startup/result`):
`go`, or what keeps the group from starting (ranks that never came, a rank started twice, a rank
told another WORLD_SIZE). Every rank reads the same verdict, so they fail together,
with one line naming the missing ranks and the host:port they were waited on. A rank that finds
no rank 0 at MASTER_ADDR:MASTER_PORT says so after the same time. The ports are probed with a
plain socket before torch's client connects, because torch's connection retries log a C++
traceback for each try.
"""

from __future__ import annotations

import datetime
import os
import socket
import time

import torch.distributed as dist

from framework.errors import ConfigError, UserError

# How long a rank waits for rank 0's verdict beyond `startup_timeout` (rank 0 decides at its own
# deadline, which may come a little after this rank's if rank 0 started later).
VERDICT_GRACE_S = 10.0
POLL_S = 0.05


class StartupError(UserError):
    """Ranks that never joined, or a master that cannot be reached, at start-up."""


def _integer(env, name: str, source: dict, low: int = 0, high: int | None = None) -> int:
    value = env.get(name)
    where = _named(name, source)
    if value is None or not value.strip().lstrip("-").isdigit():
        raise ConfigError(f"{where} is {value!r}: expected an integer")
    number = int(value)
    if number < low or (high is not None and number > high):
        bounds = f"{low}..{high}" if high is not None else f">= {low}"
        raise ConfigError(f"{where} is {number}: expected {bounds}")
    return number


def _below(env, name: str, source: dict, count_name: str, count: int) -> None:
    """A rank (`name`) must be below its count: RANK 2 of WORLD_SIZE 2 waits for a group that never fills."""
    rank = _integer(env, name, source)
    if rank >= count:
        raise ConfigError(f"{_named(name, source)} is {rank} but {_named(count_name, source)} is {count}: "
                          f"ranks are 0..{count - 1}")


def _named(name: str, source: dict) -> str:
    """`RANK`, or `RANK (from SLURM_PROCID)` when slurm.py set it."""
    return f"{name} (from {source[name]})" if name in source else name


def check_launch_environment(env=os.environ, source: dict | None = None) -> None:
    """Refuse the torchrun variables no process group can start from, one line naming the variable
    (`source`: {variable: the Slurm variable it came from}). Nothing to check without WORLD_SIZE
    or with WORLD_SIZE 1: a single process."""
    source = source or {}
    if "WORLD_SIZE" not in env:
        return
    world_size = _integer(env, "WORLD_SIZE", source, low=1)
    if world_size == 1:
        return
    for name in ("RANK", "MASTER_ADDR", "MASTER_PORT"):
        if not env.get(name):
            raise ConfigError(f"WORLD_SIZE is {world_size} but {name} is not set (torchrun sets RANK, "
                              "MASTER_ADDR and MASTER_PORT; a launcher of its own must set them too)")
    _below(env, "RANK", source, "WORLD_SIZE", world_size)
    if env.get("LOCAL_WORLD_SIZE") and "LOCAL_RANK" in env:
        _below(env, "LOCAL_RANK", source, "LOCAL_WORLD_SIZE", _integer(env, "LOCAL_WORLD_SIZE", source, low=1))
    elif "LOCAL_RANK" in env:
        _integer(env, "LOCAL_RANK", source)
    port = _integer(env, "MASTER_PORT", source, low=1, high=65535)
    address = env["MASTER_ADDR"]
    try:
        socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as err:
        raise ConfigError(f"{_named('MASTER_ADDR', source)} '{address}' does not resolve on this host "
                          f"({getattr(err, 'strerror', None) or err})") from err


def join_group_store(address: str, port: int, rank: int, world_size: int, startup_timeout_s: float,
                     timeout_s: float, prefix: str) -> dist.Store:
    """The store every rank of the group shares, once all `world_size` ranks have joined it within
    `startup_timeout_s`; its operations then wait up to `timeout_s`. Keys go under `prefix`."""
    where = f"{address}:{port}"
    hosted_by_agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"  # torchrun's agent hosts it
    hosts_store = rank == 0 and not hosted_by_agent
    limit = datetime.timedelta(seconds=startup_timeout_s)
    if not hosts_store:
        _wait_for_port(address, port, rank, startup_timeout_s)
    try:
        tcp_store = dist.TCPStore(address, port, world_size, is_master=hosts_store, timeout=limit,
                                  wait_for_workers=False, multi_tenant=True)
    except dist.DistError as err:
        role = "could not listen on" if hosts_store else "could not connect to"
        raise StartupError(f"rank {rank} {role} {where} (MASTER_ADDR:MASTER_PORT): {_first_line(err)}") from err
    store = dist.PrefixStore(prefix, tcp_store)
    try:
        store.set(f"startup/world_size{rank}", str(world_size))  # before its rank key: rank 0 reads both
        store.add(f"startup/rank{rank}", 1)  # a count: a rank started twice shows as 2
        if rank == 0:
            _decide(store, world_size, where, startup_timeout_s)
        else:
            _await_verdict(store, rank, where, startup_timeout_s)
    except dist.DistError as err:  # rank 0, which hosts the store, went away
        raise StartupError(f"rank {rank}: the store at {where} went away during start-up (did rank 0 fail?): "
                           f"{_first_line(err)}") from err
    tcp_store.set_timeout(datetime.timedelta(seconds=timeout_s))
    return store


def _wait_for_port(address: str, port: int, rank: int, startup_timeout_s: float) -> None:
    deadline = time.monotonic() + startup_timeout_s
    while True:
        try:
            with socket.create_connection((address, port), timeout=1.0):
                return
        except OSError as err:
            if time.monotonic() >= deadline:
                raise StartupError(
                    f"rank {rank}: nothing listens at {address}:{port} after {startup_timeout_s:g} s "
                    f"(dist.startup_timeout; {err.strerror or err}): rank 0 did not start, or MASTER_ADDR/"
                    "MASTER_PORT differ between processes") from err
        time.sleep(0.2)


def _decide(store, world_size: int, where: str, startup_timeout_s: float) -> None:
    keys = [f"startup/rank{r}" for r in range(world_size)]
    deadline = time.monotonic() + startup_timeout_s
    while not store.check(keys) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    problems = _problems(store, world_size, where, startup_timeout_s)
    if not problems:
        store.set("startup/result", "go")
        return
    message = "; ".join(problems)
    store.set("startup/result", message)
    # The store lives in this process: let the ranks that came read the verdict before it goes.
    came = sum(store.check([key]) for key in keys[1:])
    read_by = time.monotonic() + VERDICT_GRACE_S
    while store.add("startup/read", 0) < came and time.monotonic() < read_by:
        time.sleep(POLL_S)
    raise StartupError(f"rank 0: {message}")


def _problems(store, world_size: int, where: str, limit: float) -> list[str]:
    """What keeps the group from starting: ranks that never came, ranks started twice, ranks told
    another WORLD_SIZE (they would wait for a group of another size)."""
    present = [r for r in range(world_size) if store.check([f"startup/rank{r}"])]
    missing = [r for r in range(world_size) if r not in present]
    problems = []
    if missing:
        noun = "rank" if len(missing) == 1 else "ranks"
        problems.append(f"{noun} {', '.join(map(str, missing))} of {world_size} did not join at {where} within "
                        f"{limit:g} s (dist.startup_timeout): check that every process was started with the same "
                        "MASTER_ADDR, MASTER_PORT and WORLD_SIZE")
    twice = [r for r in present if store.add(f"startup/rank{r}", 0) > 1]
    if twice:
        problems.append(f"rank {', '.join(map(str, twice))} started more than once at {where} "
                        "(RANK or SLURM_PROCID repeated?)")
    sizes = {r: int(store.get(f"startup/world_size{r}")) for r in present}
    other = [f"rank {r} with WORLD_SIZE {size}" for r, size in sizes.items() if size != world_size]
    if other:
        problems.append(f"{', '.join(other)} joined rank 0's group of WORLD_SIZE {world_size} at {where}: every "
                        "process must be given the same WORLD_SIZE")
    return problems


def _await_verdict(store, rank: int, where: str, startup_timeout_s: float) -> None:
    # Under torchrun's agent store rank 0 may start after this rank: wait for it to join first.
    deadline = time.monotonic() + startup_timeout_s
    while not store.check(["startup/rank0"]):
        if time.monotonic() >= deadline:
            raise StartupError(f"rank {rank}: rank 0 did not join at {where} within {startup_timeout_s:g} s "
                               "(dist.startup_timeout)")
        time.sleep(POLL_S)
    deadline = time.monotonic() + startup_timeout_s + VERDICT_GRACE_S
    while not store.check(["startup/result"]):
        if time.monotonic() >= deadline:
            raise StartupError(f"rank {rank}: no start-up verdict from rank 0 at {where} within "
                               f"{startup_timeout_s + VERDICT_GRACE_S:g} s")
        time.sleep(POLL_S)
    verdict = store.get("startup/result").decode()
    store.add("startup/read", 1)
    if verdict != "go":
        raise StartupError(f"rank {rank}: {verdict}")


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]
