"""Where a run's numbers go, several places at once: the config's `loggers:` list.

    loggers: [tensorboard, csv, {type: mlflow, experiment: shapes}]   # default: [tensorboard]

Built-ins (registered in LOGGERS by name): `tensorboard` (tensorboard.py), `csv` (csv_logger.py,
needs nothing), `mlflow` (mlflow_logger.py, an optional extra; a remote server asked once with a
timeout by reachability.py). Every logger receives the same
scalars (`train/...`, `val/...`, `val_per_class/...`, `best/...`), the evaluation images (those
that take images), the key settings and summary metrics (once, as hparams) and the resolved
config. Loggers are built on every rank (their keywords are checked alike) and opened and
written on rank 0 only; the hooks write to `trainer.loggers`, a `LoggerGroup` that is empty on
the other ranks. A user logger subclasses `RunLogger` and registers with `@LOGGERS.register("name")`.
Owns: the `RunLogger` contract and `LoggerGroup` (`base.py`), the tensorboard, csv and mlflow loggers, and the one
reachability check of a remote tracking server (`reachability.py`).
May import: errors, registry, dist (rank 0 asks a tracking server), checkpoint (atomic rewrites of files on resume); within the engine,
anything (the loggers are imported by the LOGGERS registry on first lookup).
"""

from framework.engine.loggers import csv_logger, mlflow_logger, tensorboard  # noqa: F401 (registers them)
from framework.engine.loggers.base import LoggerGroup, RunLogger, build_loggers
from framework.engine.loggers.tensorboard import TensorBoardLogger

__all__ = ["LoggerGroup", "RunLogger", "TensorBoardLogger", "build_loggers"]
