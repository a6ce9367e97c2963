"""Process-group helpers that also work in a plain single-process run.

Rule kept everywhere: a collective is called on every rank, never under `if is_main()`.
"""

from __future__ import annotations

import datetime
import os
import signal

import torch
import torch.distributed as dist

from framework.dist.slurm import SLURM_SOURCES, slurm_to_torch_environment
from framework.dist.startup import check_launch_environment, join_group_store

# A gloo group for small host-side agreements (stop flags, random states); None means the
# default group, which is gloo already on CPU.
_control_group = None


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def get_rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def get_world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def is_main() -> bool:
    return get_rank() == 0


def all_reduce_sum_(tensor: torch.Tensor) -> torch.Tensor:
    """Sum `tensor` over ranks in place (no-op in a single process)."""
    if is_distributed():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def all_reduce_min(tensor: torch.Tensor) -> torch.Tensor:
    """The minimum of `tensor` over ranks, in place (no-op in a single process)."""
    if is_distributed():
        dist.all_reduce(tensor, op=dist.ReduceOp.MIN)
    return tensor


def all_reduce_mean(tensor: torch.Tensor) -> torch.Tensor:
    if not is_distributed():
        return tensor
    tensor = tensor.clone()
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor / get_world_size()


def all_gather_rows(rows: torch.Tensor) -> torch.Tensor:
    """Every rank's rows (dim 0) concatenated in rank order, on every rank; row counts may differ
    between ranks (a collective; `rows` itself in a single process). Reads the counts on the
    host: for evaluation, not for the training step."""
    if not is_distributed():
        return rows
    count = torch.tensor([rows.shape[0]], device=rows.device)
    counts = [torch.zeros_like(count) for _ in range(get_world_size())]
    dist.all_gather(counts, count)
    counts = [int(c) for c in counts]
    # all_gather needs equal shapes: pad every rank's rows to the longest, cut back after.
    padded = rows.new_zeros(max(counts), *rows.shape[1:])
    padded[: rows.shape[0]] = rows
    gathered = [torch.zeros_like(padded) for _ in counts]
    dist.all_gather(gathered, padded)
    return torch.cat([g[:c] for g, c in zip(gathered, counts)])


def broadcast_from_main_(tensor: torch.Tensor) -> torch.Tensor:
    """Rank 0's values into `tensor` on every rank, in place (a collective; no-op in a single
    process). A CPU tensor travels through the backend's device (NCCL takes CUDA tensors only)."""
    if not is_distributed():
        return tensor
    on_cuda = dist.get_backend() == "nccl" and tensor.device.type != "cuda"
    carrier = tensor.to(torch.device("cuda", torch.cuda.current_device())) if on_cuda else tensor
    dist.broadcast(carrier, src=0)
    if carrier is not tensor:
        tensor.copy_(carrier)
    return tensor


def gather_by_rank(obj) -> dict:
    """{rank: obj of that rank} on every rank (a collective; host objects through gloo)."""
    if not is_distributed():
        return {0: obj}
    gathered = [None] * get_world_size()
    dist.all_gather_object(gathered, obj, group=_control_group)
    return dict(enumerate(gathered))


def barrier() -> None:
    if is_distributed():
        dist.barrier()


def launched_by_torchrun() -> bool:
    size = os.environ.get("WORLD_SIZE", "1")
    return not size.strip().isdigit() or int(size) > 1  # a malformed size is refused by init_distributed


def choose_backend(backend: str, device: str, cuda_available: bool) -> str:
    """`dist.backend`, with `auto` resolved for the config's `device` (see init_distributed)."""
    if backend != "auto":
        return backend
    on_cuda = device.startswith("cuda") or (device == "auto" and cuda_available)
    return "nccl" if on_cuda else "gloo"


def init_distributed(backend: str = "auto", timeout_s: float = 1800, device: str = "auto",
                     startup_timeout_s: float = 120) -> dict[str, str]:
    """Join the process group torchrun describes in the environment, or srun (Slurm's variables
    turned into torchrun's by `slurm.py`); a no-op in a single process.

    `backend: auto` follows the config's `device`: NCCL when the run trains on CUDA (`auto` on a
    machine with CUDA, `cuda`, `cuda:N`), gloo otherwise; so `device: cpu` on a GPU machine gets
    gloo, whose collectives take CPU tensors (NCCL's refuse them). Every process uses the device
    of its LOCAL_RANK. The launch variables are checked first; then every rank must join within
    `startup_timeout_s`, or all fail with one line naming the ranks that never came
    (`startup.py`). After that a collective that waits longer than `timeout_s` fails on every
    rank instead of hanging. Returns the variables taken from Slurm (empty when not under srun).
    """
    if is_distributed():
        return {}
    preset = {name for name in ("MASTER_ADDR", "MASTER_PORT") if os.environ.get(name)}
    from_slurm = slurm_to_torch_environment()
    check_launch_environment(os.environ, {k: SLURM_SOURCES[k] for k in from_slurm if k not in preset})
    if not launched_by_torchrun():
        return from_slurm
    backend = choose_backend(backend, device, torch.cuda.is_available())
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    # torchrun keeps one store across restarts of the group: keys of a restarted group get their
    # own prefix, or its ranks may read the addresses of the previous attempt's dead processes.
    store = join_group_store(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), rank, world_size,
                             startup_timeout_s, timeout_s,
                             prefix=f"attempt_{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}")
    dist.init_process_group(backend=backend, store=store, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=timeout_s))
    global _control_group
    # Host-side agreements go through gloo, so they never wait on a GPU stream.
    _control_group = None if backend == "gloo" else dist.new_group(backend="gloo")
    return from_slurm


def agree_on_stop(received: signal.Signals | None) -> signal.Signals | None:
    """The stop signal any rank received (every rank calls this once per iteration)."""
    if not is_distributed():
        return received
    flag = torch.tensor([int(received or 0)])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=_control_group)
    return signal.Signals(int(flag)) if int(flag) else None


def agree_any(flag: bool) -> bool:
    """True on every rank when `flag` is true on any rank (a collective: every rank calls it)."""
    if not is_distributed():
        return flag
    value = torch.tensor([int(bool(flag))])
    dist.all_reduce(value, op=dist.ReduceOp.MAX, group=_control_group)
    return bool(int(value))


def destroy_distributed() -> None:
    if is_distributed():
        dist.destroy_process_group()
