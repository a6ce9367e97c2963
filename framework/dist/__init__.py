"""Several processes: the process group, per-network DDP wrapping, SyncBN.

Owns: starting and ending the process group from torchrun's environment (or srun's: Slurm's
variables turned into torchrun's in `slurm.py`; the launch variables checked and every rank's
arrival awaited in bounded time in `startup.py`) and the reductions every rank calls alike
(`process_group.py`), `NetworkDDP` and `wrap_networks`
(`ddp.py`: each network wrapped apart, no `module.` in state dicts), and SyncBN conversion
(`sync_bn.py`: torch's on CUDA, an all-reduce implementation on CPU/gloo).
Every other package calls these instead of torch.distributed: `unwrap` (the network inside a
DDP wrapper), `all_reduce_sum_`, `all_gather_rows`, `broadcast_from_main_`, `get_rank`, ...
May import: errors; torch, and no other framework package, so every layer may use it. Every
helper works in a plain single-process run too.
"""

from framework.dist.ddp import NetworkDDP, unwrap, unwrapped_networks, wrap_networks
from framework.dist.process_group import (
    agree_any,
    agree_on_stop,
    all_gather_rows,
    all_reduce_mean,
    all_reduce_min,
    all_reduce_sum_,
    barrier,
    broadcast_from_main_,
    destroy_distributed,
    gather_by_rank,
    get_rank,
    get_world_size,
    init_distributed,
    is_distributed,
    is_main,
    launched_by_torchrun,
)
from framework.dist.startup import StartupError, check_launch_environment

__all__ = ["NetworkDDP", "StartupError", "agree_any", "agree_on_stop", "all_gather_rows", "all_reduce_mean",
           "all_reduce_min", "all_reduce_sum_", "barrier", "broadcast_from_main_", "check_launch_environment",
           "destroy_distributed", "gather_by_rank", "get_rank", "get_world_size", "init_distributed", "is_distributed",
           "is_main", "launched_by_torchrun", "unwrap", "unwrapped_networks", "wrap_networks"]
