"""The logger contract (`RunLogger`), the fan-out the hooks write to (`LoggerGroup`), and
`build_loggers` for the config's `loggers:` list."""

from __future__ import annotations

from pathlib import Path

import torch

from framework.errors import ConfigError
from framework.registry import LOGGERS


class RunLogger:
    """One place a run's numbers go. Built from the config (its keywords checked before the run
    starts), then `open`ed on rank 0 once the work dir is claimed. Values arrive as host floats."""

    takes_images = True  # False: the evaluation skips drawing images for this logger alone

    def open(self, work_dir: Path, config_text: str, resumed_iter: int | None) -> None:
        """Start writing into `work_dir`; `config_text` is the resolved config (YAML);
        `resumed_iter`: the checkpoint's iteration when resuming (drop what was logged after it)."""

    def log_scalars(self, scalars: dict[str, float], step: int) -> None:
        raise NotImplementedError

    def log_image(self, tag: str, image: torch.Tensor, step: int) -> None:
        """`image`: 3 x H x W float in [0, 1]."""

    def log_hparams(self, settings: dict, metrics: dict[str, float]) -> None:
        """The run's key settings ({'optim.lr': 0.001, ...}) and its summary metrics' latest values."""

    def flush(self) -> None:
        pass

    def close(self, status: str) -> None:
        """`status`: finished, failed or stopped (a signal ended the run; it can be resumed)."""


class LoggerGroup:
    """Every logger of the run, written to at once; empty (and false) on ranks other than 0."""

    def __init__(self, loggers: list[RunLogger] | tuple = ()):
        self.loggers = list(loggers)

    def __bool__(self) -> bool:
        return bool(self.loggers)

    @property
    def takes_images(self) -> bool:
        return any(logger.takes_images for logger in self.loggers)

    def of_type(self, cls: type) -> RunLogger | None:
        return next((logger for logger in self.loggers if isinstance(logger, cls)), None)

    def open(self, work_dir: str | Path, config_text: str, resumed_iter: int | None) -> None:
        for logger in self.loggers:
            logger.open(Path(work_dir), config_text, resumed_iter)

    def log_scalars(self, scalars: dict[str, float], step: int) -> None:
        for logger in self.loggers:
            logger.log_scalars(scalars, step)

    def log_image(self, tag: str, image: torch.Tensor, step: int) -> None:
        for logger in self.loggers:
            if logger.takes_images:
                logger.log_image(tag, image, step)

    def log_hparams(self, settings: dict, metrics: dict[str, float]) -> None:
        for logger in self.loggers:
            logger.log_hparams(settings, metrics)

    def flush(self) -> None:
        for logger in self.loggers:
            logger.flush()

    def close(self, status: str) -> None:
        for logger in self.loggers:
            logger.close(status)


def build_loggers(entries: list) -> list[RunLogger]:
    """The `loggers:` list: names (`csv`) or nodes (`{type: mlflow, experiment: seg}`), each
    built once; a logger type listed twice is refused (both would write the same files)."""
    nodes = [{"type": entry} if isinstance(entry, str) else dict(entry) for entry in entries]
    seen: set[str] = set()
    loggers = []
    for i, node in enumerate(nodes):
        if node.get("type") in seen:
            raise ConfigError(f"loggers[{i}]: '{node['type']}' is listed twice")
        seen.add(node.get("type"))
        loggers.append(LOGGERS.build(node, path=f"loggers[{i}]"))
    return loggers
