"""`csv`: plain files that need no library, in <work_dir>/csv/.

    scalars.csv    iter,tag,value   one row per value (long format: train and val tags differ)
    hparams.json   {"settings": {...}, "metrics": {...}}
    config.yaml    the resolved config

Evaluation records are also in <work_dir>/metrics.jsonl (one JSON line per evaluation), written
whatever the loggers are. Images are not kept.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from framework.checkpoint.files import atomic_write_bytes
from framework.engine.loggers.base import RunLogger
from framework.registry import LOGGERS


@LOGGERS.register("csv")
class CSVLogger(RunLogger):
    takes_images = False

    def __init__(self):
        self.folder: Path | None = None
        self._file = None
        self._rows = None

    def open(self, work_dir: Path, config_text: str, resumed_iter: int | None) -> None:
        self.folder = work_dir / "csv"
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / "scalars.csv"
        if resumed_iter is not None and path.is_file():  # a resumed run logs the later steps again
            with open(path, newline="", encoding="utf-8") as f:
                kept = [row for row in csv.reader(f) if row[0] == "iter" or int(row[0]) <= resumed_iter]
            buffer = io.StringIO()
            csv.writer(buffer).writerows(kept)
            atomic_write_bytes(path, lambda f: f.write(buffer.getvalue().encode()))
        new = not path.is_file()
        self._file = open(path, "a", newline="", encoding="utf-8")
        self._rows = csv.writer(self._file)
        if new:
            self._rows.writerow(["iter", "tag", "value"])
        atomic_write_bytes(self.folder / "config.yaml", lambda f: f.write(config_text.encode()))

    def log_scalars(self, scalars: dict[str, float], step: int) -> None:
        self._rows.writerows([step, tag, repr(float(value))] for tag, value in scalars.items())

    def log_hparams(self, settings: dict, metrics: dict[str, float]) -> None:
        text = json.dumps({"settings": settings, "metrics": metrics}, indent=1, default=str)
        atomic_write_bytes(self.folder / "hparams.json", lambda f: f.write(text.encode()))

    def flush(self) -> None:
        self._file.flush()

    def close(self, status: str) -> None:
        self._file.close()
