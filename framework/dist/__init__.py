"""Several processes: the process group, per-network DDP wrapping, SyncBN.

Owns: starting and ending the process group from torchrun's environment (or srun's: Slurm's
variables turned into torchrun's in `slurm.py`; the launch variables checked and every rank's
arrival awaited in bounded time in `startup.py`) and the reductions every rank calls alike
(`process_group.py`), `NetworkDDP` and `wrap_networks`
(`ddp.py`: each network wrapped apart, no `module.` in state dicts), and SyncBN conversion
(`sync_bn.py`: torch's on CUDA, an all-reduce implementation on CPU/gloo).
May import: errors and torch; no other framework package. Every helper works in a plain
single-process run too.
"""

from framework.dist.ddp import NetworkDDP, unwrapped_networks, wrap_networks
from framework.dist.process_group import (
    agree_any,
    agree_on_stop,
    all_reduce_mean,
    all_reduce_min,
    all_reduce_sum_,
    barrier,
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

__all__ = ["NetworkDDP", "StartupError", "agree_any", "check_launch_environment", "agree_on_stop", "all_reduce_mean", "all_reduce_min", "all_reduce_sum_", "barrier",
           "destroy_distributed", "gather_by_rank", "get_rank", "get_world_size", "init_distributed",
           "is_distributed", "is_main", "launched_by_torchrun", "unwrapped_networks", "wrap_networks"]
