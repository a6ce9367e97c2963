"""`tensorboard` (the default logger): event files in <work_dir>/tensorboard."""

from __future__ import annotations

from pathlib import Path

import torch

from framework.engine.loggers.base import RunLogger
from framework.registry import LOGGERS, import_without


@LOGGERS.register("tensorboard")
class TensorBoardLogger(RunLogger):
    """Scalars, images, the HPARAMS tab and the resolved config (TEXT tab). Also available to
    user hooks as `trainer.writer` (the SummaryWriter)."""

    def __init__(self):
        self.writer = None

    def open(self, work_dir: Path, config_text: str, resumed_iter: int | None) -> None:
        # without boto3: TensorBoard's S3 event files, never used (the work dir is a local folder)
        SummaryWriter = import_without("torch.utils.tensorboard", ("boto3", "botocore")).SummaryWriter

        # A resumed run hides the events logged after its checkpoint: it logs those steps again.
        purge_step = resumed_iter + 1 if resumed_iter is not None else None
        # max_queue: the writer thread's queue of serialized events. At its default of 10, logging a
        # GAN's 20 scalars at once waited on that thread: 0.63-0.66 ms per log line in the training
        # loop, 0.25 with room for them (benchmarks/studies/tensorboard_queue.py). flush() and close()
        # still wait until every queued event is written.
        self.writer = SummaryWriter(str(work_dir / "tensorboard"), purge_step=purge_step, max_queue=1000)
        if resumed_iter is None:
            # Indented: TensorBoard renders text as markdown, and indentation keeps the YAML as is.
            self.writer.add_text("config", "".join(f"    {line}\n" for line in config_text.splitlines()), 0)
            self.writer.flush()  # on disk now, not left in the writer's buffer for a later write

    def log_scalars(self, scalars: dict[str, float], step: int) -> None:
        for tag, value in scalars.items():
            self.writer.add_scalar(tag, value, step)

    def log_image(self, tag: str, image: torch.Tensor, step: int) -> None:
        self.writer.add_image(tag, image, step)

    def log_hparams(self, settings: dict, metrics: dict[str, float]) -> None:
        from torch.utils.tensorboard.summary import hparams

        for summary_proto in hparams(settings, metrics):
            self.writer.file_writer.add_summary(summary_proto)

    def flush(self) -> None:
        self.writer.flush()

    def close(self, status: str) -> None:
        if status != "failed":  # after an error (a full disk, say) write no more: LoggerHook has flushed
            self.writer.close()
