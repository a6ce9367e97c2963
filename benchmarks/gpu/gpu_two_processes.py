"""Two processes on one GPU: DDP and SyncBN against one process with the double batch, the
multi-process step of benchmarks/gpu/gpu_check.py.

NCCL refuses two ranks on one device ("Duplicate GPU detected") in most versions; each check
tries NCCL first and falls back to gloo with CUDA tensors, and says which backend ran. Both ranks
use GPU 0: each is told LOCAL_RANK=0 (RANK 0 and 1), so the framework's `device: cuda` and NCCL's
device choice both name the one GPU.

- `ddp`: tools/train.py on the Quickstart UNet without BatchNorm (SGD, 5 iterations,
  `deterministic: warn`), two processes at batch 2 against one at batch 4: final weights equal
  within `--atol` (TF32 off through NVIDIA_TF32_OVERRIDE=0, so only summation order differs).
- `sync_bn`: tests/scripts/sync_bn_check.py's BatchNorm network converted by the framework
  (torch's SyncBatchNorm on CUDA) in DDP, each rank on half of a fixed batch, against full-batch
  BatchNorm in one process: outputs, input and weight gradients, running statistics.

    python benchmarks/gpu/gpu_two_processes.py --json two.json
    python benchmarks/gpu/gpu_two_processes.py --device cpu --backends gloo --json /tmp/two.json
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests/scripts"))
CONFIG = REPO / "configs/segmentation/unet_shapes.yaml"
NO_BN = ["amp.enabled=false", "seed=3", "train.max_iters=5", "train.val_interval=0", "train.ckpt_interval=5",
         "train.log_interval=1", "task.model.norm=none", "data.train.dataset.num_samples=64",
         "data.train.dataset.size=32", "data.train.num_workers=0", "deterministic=warn", "train.progress_bar=false",
         "optim={type: SGD, lr: 0.05, momentum: 0.9, scheduler: {type: WarmupLR, warmup_iters: 2}}"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(command: list[str], world: int, timeout: float, log: Path) -> bool:
    """`command` as `world` ranks of one group, every rank on the first GPU; whether all succeeded."""
    port, processes = free_port(), []
    for rank in range(world):
        env = {**os.environ, "PYTHONPATH": str(REPO), "NVIDIA_TF32_OVERRIDE": "0", "OMP_NUM_THREADS": "2"}
        if world > 1:
            env.update(RANK=str(rank), LOCAL_RANK="0", WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world),
                       GROUP_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        out = open(log.with_suffix(f".rank{rank}.log"), "w")
        processes.append((subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT), out))
    # A rank that fails (NCCL refusing a second rank on the device) leaves the other waiting in a
    # collective: stop waiting at the first failure, or at the timeout.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(p.poll() is None for p, _ in processes):
        if any(p.poll() not in (None, 0) for p, _ in processes):
            break
        time.sleep(0.2)
    for process, out in processes:
        if process.poll() is None:
            process.kill()
        process.wait()
        out.close()
    return all(process.returncode == 0 for process, _ in processes)


def max_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k].float() - b[k].float()).abs().max()) if a[k].numel() else 0.0 for k in a)


def ddp_check(args, folder: Path) -> dict:
    import torch

    def train(name, world, batch, backend):
        work = folder / name
        command = [sys.executable, str(REPO / "tools/train.py"), "--config", str(CONFIG), "--work-dir", str(work),
                   f"device={args.device_spec}", f"dist.backend={backend}", *NO_BN, f"data.train.batch_size={batch}"]
        if not run_ranks(command, world, args.timeout, folder / name):
            return None
        return torch.load(work / "checkpoints/iter_5.pth", weights_only=True, map_location="cpu")["task"]

    one = train("one", 1, 4, "gloo")
    if one is None:
        return {"ok": False, "error": "the one-process run failed", "logs": str(folder)}
    for backend in args.backends:
        two = train(f"two_{backend}", 2, 2, backend)
        if two is not None:
            difference = max_difference(two, one)
            return {"backend": backend, "max_abs_difference": difference, "atol": args.atol,
                    "ok": difference <= args.atol}
    return {"ok": False, "error": f"two processes failed with {', '.join(args.backends)}"}


def sync_bn_rank(backend: str, device_spec: str, out: Path) -> None:
    """One rank of the SyncBN check (run by `sync_bn_check` below in two processes)."""
    import torch
    import torch.distributed as dist
    from sync_bn_check import full_batch, loss_weights, network, run

    from framework.dist import NetworkDDP
    from framework.dist.sync_bn import convert_sync_batchnorm

    device = torch.device(device_spec)
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    model = NetworkDDP(convert_sync_batchnorm(network().to(device), device))
    half, weights = (t.chunk(world)[rank].to(device) for t in (full_batch(), loss_weights()))
    result = run(model, half, weights)
    torch.save({k: ({n: t.cpu() for n, t in v.items()} if isinstance(v, dict) else v.cpu()) for k, v in result.items()},
               out / f"rank{rank}.pt")
    del model
    dist.destroy_process_group()


def sync_bn_check(args, folder: Path) -> dict:
    import torch
    from sync_bn_check import full_batch, loss_weights, network, run

    device = torch.device(args.device_spec)
    reference = run(network().to(device), full_batch().to(device), loss_weights().to(device))
    for backend in args.backends:
        out = folder / f"sync_bn_{backend}"
        out.mkdir()
        command = [sys.executable, __file__, "--sync-bn-rank", backend, "--device", args.device, "--out", str(out)]
        if not run_ranks(command, 2, args.timeout, out / "rank"):
            continue
        ranks = [torch.load(out / f"rank{r}.pt", weights_only=True, map_location="cpu") for r in range(2)]
        differences = {
            "output": float((torch.cat([r["y"] for r in ranks]) - reference["y"].cpu()).abs().max()),
            # each rank's loss is the mean over its half: its input gradient is twice the full batch's
            "input_grad": float((torch.cat([r["x_grad"] for r in ranks]) / 2 - reference["x_grad"].cpu()).abs().max()),
            "weight_grads": max(max_difference(r["grads"], {k: v.cpu() for k, v in reference["grads"].items()})
                                for r in ranks),
            "running_stats": max(max_difference(r["buffers"], {k: v.cpu() for k, v in reference["buffers"].items()})
                                 for r in ranks)}
        return {"backend": backend, "max_abs_difference": differences, "atol": args.atol,
                "ok": max(differences.values()) <= args.atol}
    return {"ok": False, "error": f"two processes failed with {', '.join(args.backends)}", "logs": str(folder)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="cuda (GPU 0 for both ranks) or cpu")
    parser.add_argument("--backends", nargs="+", default=["nccl", "gloo"], help="tried in this order")
    parser.add_argument("--atol", type=float, default=1e-4)
    parser.add_argument("--timeout", type=float, default=40, help="seconds per multi-process attempt")
    parser.add_argument("--json")
    parser.add_argument("--sync-bn-rank", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.device_spec = "cuda:0" if args.device == "cuda" else args.device
    if args.sync_bn_rank:
        sync_bn_rank(args.sync_bn_rank, args.device_spec, Path(args.out))
        return 0
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, check in (("ddp", ddp_check), ("sync_bn", sync_bn_check)):
            folder = Path(tmp) / name
            folder.mkdir()
            results[name] = check(args, folder)
            if results[name].get("backend") == "gloo" and "nccl" in args.backends:
                args.backends.remove("nccl")  # refused once (one GPU, two ranks): the same answer next time
            print(f"{name}: {json.dumps(results[name])}", flush=True)
            if args.json:
                Path(args.json).write_text(json.dumps(results, indent=1))
    return 0 if all(r["ok"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
