"""The config's public keys: their defaults (`DEFAULTS`) and their types and ranges (`SCHEMA`).

Read by `load_config` (framework/config/loading.py), which checks a whole config against `SCHEMA`
after overrides and interpolation, and by the generated key reference in the docs.
"""

from __future__ import annotations

from typing import Any

from framework.config.rules import (
    REQUIRED,
    any_of,
    boolean,
    each,
    integer,
    list_of,
    mapping,
    node,
    number,
    one_of,
    optional,
    section,
    string,
    strings,
)

# `amp.enabled: auto` chooses the dtype by the hardware: an explicit float16 would be dropped, so it is refused.
AUTO_WITH_FLOAT16 = ("amp.dtype: float16 with amp.enabled: auto, which picks bfloat16 where the hardware computes it "
                     "natively and float32 elsewhere; set amp.enabled: true to train in float16 (with a GradScaler), "
                     "or remove amp.dtype")

# Every top-level key a config may have, with its default. Sections given as dicts are
# validated one level deeper as well (unknown `train.*` keys are errors too).
DEFAULTS: dict[str, Any] = {
    "work_dir": None,  # default: work_dirs/<config file name>
    "seed": 0,
    "deterministic": False,  # deterministic algorithms (slower), for exact reproduction; warn: where torch has none (some CUDA ops), run the op with a warning instead of failing
    "cudnn_benchmark": True,  # CUDA: cuDNN times its algorithms per input shape, keeps the fastest (off with deterministic)
    "device": "auto",  # auto (CUDA when present, else CPU), cpu, cuda, cuda:1
    "custom_imports": [],  # modules imported before anything is built (user registrations)
    "load_from": None,  # weights of the whole task to start from (not a resume): a path or {checkpoint, ...}
    "auto_resume": "auto",  # true: resume from the work dir's latest checkpoint when there is one;
    # auto: only when torchrun restarted the workers (TORCHELASTIC_RESTART_COUNT > 0) or Slurm
    # requeued the job (SLURM_RESTART_COUNT > 0); false: never
    "task": REQUIRED,
    "data": REQUIRED,
    "optim": None,  # one optimizer: {type, lr, ..., params?, scheduler?, clip_grad?}
    "optimizers": None,  # several, by name: {generator: {...}, discriminator: {...}}
    "metrics": [],
    "hooks": [],  # extra hooks: [{type: MyHook, ...}]
    "loggers": ["tensorboard"],  # where scalars/images/hparams go: tensorboard, csv, mlflow (names or nodes)
    "sync_bn": False,  # BatchNorm statistics over all processes (multi-process runs only)
    "channels_last": False,  # NHWC memory format for the task's networks; auto: NHWC on AVX-512 CPUs and tensor-core GPUs (runtime/precision.py)
    "malloc_tuning": True,  # glibc: keep freed host memory for the next step (framework/runtime/malloc.py)
    "threads": "auto",  # intra-op threads: auto (the cores this process may use: affinity, CPU quota; OMP_NUM_THREADS kept) or N (framework/runtime/threads.py)
    "compile": False,  # torch.compile each trainable network: true, or {backend, mode, dynamic, fullgraph, options}
    "amp": {
        # auto: bfloat16 autocast where the CPU/GPU computes it natively, float32 elsewhere (runtime/precision.py);
        # true: always, in `dtype`; false: float32
        "enabled": "auto",
        "dtype": None,  # with enabled true: float16 (with a GradScaler; also when unset) or bfloat16 (no scaler; works on CPU); with auto: unset or bfloat16 (float16 is refused)
    },
    "dist": {
        "backend": "auto",  # auto: nccl when `device` is a GPU (auto with CUDA present, cuda, cuda:N), else gloo
        "timeout": 1800,  # seconds a collective may wait before every rank fails
        "startup_timeout": 120,  # seconds every rank has to join at start-up; then all fail naming the ranks that did not come
        "requeue_signal": "USR1",  # the signal that stops a run with a checkpoint before a time limit (Slurm's --signal=USR1@120), besides TERM and INT; null: none
        "find_unused_parameters": False,  # slow escape hatch for networks that skip layers
        "broadcast_buffers": True,
    },
    "train": {
        "max_iters": None,
        "max_epochs": None,  # alternative to max_iters
        "log_interval": 50,
        "val_interval": 1000,  # 0 disables evaluation during training
        "val_at_start": False,  # evaluate once before the first iteration
        "ckpt_interval": 1000,
        "keep_last": 3,  # iteration checkpoints kept (the best one is kept apart)
        "best_metric": None,  # e.g. mIoU: keeps checkpoints/best.pth
        "best_mode": "auto",
        "vis_images": 4,  # images written to TensorBoard per evaluation
        "progress_bar": "auto",  # auto: only when attached to a terminal
        "accumulate": 1,  # micro-batches per optimizer step (gradient accumulation)
        "nan_policy": "raise",  # a non-finite loss: raise (stop, keep what was saved) or skip (the step)
        "nan_max_skips": 10,  # skip: consecutive skipped iterations allowed before it raises
    },
}

# The type and range of every public key, checked on the whole config (after overrides and
# interpolation) before anything is built; every mistake is reported, one line each.
LOADER = section({"dataset": node, "batch_size": integer(1), "num_workers": any_of(integer(0), one_of("auto")),
                   "shuffle": boolean, "pin_memory": one_of(True, False, "auto"), "persistent_workers": boolean,
                   "cache": optional(one_of("memory", "auto")), "cache_limit_mb": number(above=0)}, required=("dataset",))
CLIP_GRAD = section({"max_norm": number(above=0), "norm_type": number(above=0), "error_if_nonfinite": boolean,
                      "foreach": optional(boolean)}, required=("max_norm",))
OPTIMIZER = section({"type": string, "lr": number(above=0, finite=True), "weight_decay": number(min=0, finite=True),
                      "momentum": number(min=0, finite=True), "eps": number(above=0, finite=True), "params": optional(strings),
                      "clip_grad": optional(CLIP_GRAD), "scheduler": optional(node)},
                     required=("type",), open=True)  # other keywords go to the optimizer class
LOAD_SPEC = section({"checkpoint": string, "prefix": string, "rename": mapping, "strict": boolean,
                      "min_loaded_ratio": number(min=0, max=1), "adapt_in_channels": optional(one_of("zeros", "mean"))},
                     required=("checkpoint",))
# torch.manual_seed takes < 2**64 and each process adds its rank: a seed fits in int64.
SEED_MAX = 2**63 - 1
SCHEMA = section({
    "work_dir": optional(string), "seed": integer(0, max=SEED_MAX), "deterministic": one_of(True, False, "warn"), "cudnn_benchmark": boolean,
    "device": string,
    "custom_imports": strings, "load_from": optional(any_of(string, mapping)),
    "auto_resume": one_of(True, False, "auto"),
    "task": node, "data": section({"train": optional(LOADER), "val": optional(LOADER), "test": optional(LOADER)}),
    "optim": optional(OPTIMIZER), "optimizers": optional(each(OPTIMIZER)),
    "metrics": list_of(node), "hooks": list_of(node), "loggers": list_of(any_of(string, node)), "sync_bn": boolean, "channels_last": one_of(True, False, "auto"), "malloc_tuning": boolean,
    "threads": any_of(integer(1), one_of("auto")),
    "compile": any_of(boolean, mapping),
    "amp": section({"enabled": one_of(True, False, "auto"), "dtype": optional(one_of("float16", "bfloat16"))}),
    "dist": section({"backend": one_of("auto", "gloo", "nccl", "mpi"), "timeout": number(above=0),
                     "startup_timeout": number(above=0),
                     "requeue_signal": optional(one_of("USR1", "USR2", "HUP", "ALRM", "XCPU")),
                     "find_unused_parameters": boolean, "broadcast_buffers": boolean}),
    "train": section({
        "max_iters": optional(integer(1)), "max_epochs": optional(integer(1)),
        "log_interval": integer(0), "val_interval": integer(0), "val_at_start": boolean,  # interval 0: never
        "ckpt_interval": integer(0), "keep_last": integer(0),  # keep_last 0: keep all
        "best_metric": optional(string), "best_mode": one_of("auto", "max", "min"), "vis_images": integer(0),
        "progress_bar": one_of(True, False, "auto"), "accumulate": integer(1),
        "nan_policy": one_of("raise", "skip"), "nan_max_skips": integer(0)}),
}, required=("task", "data"))
