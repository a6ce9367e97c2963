"""`mlflow`: one MLflow run per training run (an optional extra: `pip install -e '.[mlflow]'`,
which installs mlflow-skinny).

    loggers: [tensorboard, {type: mlflow, experiment: shapes, run_name: unet-r18}]

Where it goes: `tracking_uri`, else the MLFLOW_TRACKING_URI environment variable, else a local
file store in the work dir (`file://<work_dir>/mlruns`; open it with `mlflow ui
--backend-store-uri <that uri>`). With the default nothing leaves the machine: the file store
is plain files, and MLflow's usage telemetry is switched off (MLFLOW_DISABLE_TELEMETRY=true
unless the environment sets it). MLflow 3 keeps its file store in maintenance mode and refuses
it unless MLFLOW_ALLOW_FILE_STORE=true, which this logger sets for file: URIs (unless set).

What it receives: every scalar (metric keys are the TensorBoard tags, characters MLflow does
not take replaced by `_`), the evaluation images (artifacts under images/), the key settings as
parameters, the resolved config as the artifact config.yaml. The run ends FINISHED, FAILED, or
KILLED when a signal stopped it. A resumed training run continues the same MLflow run (its id
is kept in <work_dir>/mlflow_run.json, with the tracking URI, null for the work dir's store); the steps after the checkpoint are logged again, and
MLflow keeps both values of such a step in its history. Resumed against another tracking store,
it starts a new run there (the recorded id belongs to the first store).

A remote server (http/https) is asked once when the logger is built, on rank 0, before anything
is written: `timeout` seconds (default 10) to connect and answer. No answer ends start-up in one
line naming the URI, or with `required: false` the run goes on without this logger (a warning says so).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import time
from pathlib import Path

import torch

from framework.checkpoint.files import atomic_write_bytes
from framework.dist import is_main
from framework.engine.loggers.base import RunLogger
from framework.engine.loggers.reachability import is_remote, unreachable_reason
from framework.errors import ConfigError
from framework.registry import LOGGERS

logger = logging.getLogger("framework")

RUN_RECORD = "mlflow_run.json"
STATUS = {"finished": "FINISHED", "failed": "FAILED", "stopped": "KILLED"}


def mlflow_key(tag: str) -> str:
    """MLflow takes letters, digits, `_ - . / ` and spaces in metric and parameter names."""
    return re.sub(r"[^\w\-. /]", "_", tag)


@LOGGERS.register("mlflow")
class MLflowLogger(RunLogger):
    def __init__(self, tracking_uri: str | None = None, experiment: str | None = None,
                 run_name: str | None = None, tags: dict | None = None, timeout: float = 10.0,
                 required: bool = True):
        if importlib.util.find_spec("mlflow") is None:
            raise ConfigError("the mlflow logger needs MLflow: pip install -e '.[mlflow]' (or mlflow-skinny)")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < float("inf"):
            raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")
        if not isinstance(required, bool):
            raise ValueError(f"required must be true or false, got {required!r}")
        self.tracking_uri, self.experiment, self.run_name = tracking_uri, experiment, run_name
        self.tags = {str(k): str(v) for k, v in (tags or {}).items()}
        self.timeout, self.required = float(timeout), required
        self.client = None
        self.run_id: str | None = None
        self.enabled = True  # False: the server did not answer and required is false
        if is_main():  # only rank 0 logs; asked now, before the run writes anything
            self._check_server()

    def _chosen_uri(self) -> str | None:
        return self.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")  # None: the work dir's store

    def _check_server(self) -> None:
        uri = self._chosen_uri()
        if not uri or not is_remote(uri):
            return
        logger.info(f"mlflow: asking the tracking server {uri} (timeout {self.timeout:g} s)")
        reason = unreachable_reason(uri, self.timeout)
        if reason is None:
            return
        if self.required:
            raise ConfigError(f"tracking server {uri}: {reason} (check tracking_uri / "
                              "MLFLOW_TRACKING_URI; a longer timeout; or required: false to train without it)")
        logger.warning(f"mlflow: tracking server {uri}: {reason}; training without the mlflow logger "
                       "(required: false)")
        self.enabled, self.takes_images = False, False

    def open(self, work_dir: Path, config_text: str, resumed_iter: int | None) -> None:
        if not self.enabled:
            return
        chosen = self._chosen_uri()
        uri = chosen or (work_dir.resolve() / "mlruns").as_uri()
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # before mlflow is imported
        if uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        from mlflow.exceptions import MlflowException

        try:
            self._start_run(uri, chosen, work_dir, config_text, resumed_iter)
        except MlflowException as err:  # a server that answers but refuses (credentials, a wrong path)
            reason = (str(err).strip() or type(err).__name__).splitlines()[0].split(" Response body:")[0]
            if self.required:
                raise ConfigError(f"mlflow logger: tracking store {uri}: {reason} (required: false trains "
                                  "without it)") from err
            logger.warning(f"mlflow: tracking store {uri}: {reason}; training without the mlflow logger "
                           "(required: false)")
            self.run_id, self.enabled, self.takes_images = None, False, False

    def _start_run(self, uri: str, chosen: str | None, work_dir: Path, config_text: str,
                   resumed_iter: int | None) -> None:
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=uri)
        record_path = work_dir / RUN_RECORD
        record = json.loads(record_path.read_text()) if record_path.is_file() else {}
        # the recorded run exists in the store it was created in, and only there
        if resumed_iter is not None and record.get("run_id") and record.get("tracking_uri") == chosen:
            self.run_id = record["run_id"]
            self.client.update_run(self.run_id, status="RUNNING")
            return
        if resumed_iter is not None and record.get("run_id"):
            logger.info(f"mlflow: the recorded run {record['run_id']} belongs to the tracking store "
                        f"{record.get('tracking_uri') or 'in the work dir'}; starting a new run in {uri}")
        name = self.experiment or work_dir.name
        found = self.client.get_experiment_by_name(name)
        experiment_id = found.experiment_id if found else self.client.create_experiment(name)
        run = self.client.create_run(experiment_id, run_name=self.run_name or work_dir.name, tags=self.tags)
        self.run_id = run.info.run_id
        # tracking_uri null: the store in the work dir, wherever the work dir is moved to
        text = json.dumps({"tracking_uri": chosen, "experiment": name, "run_id": self.run_id})
        atomic_write_bytes(record_path, lambda f: f.write(text.encode()))
        self.client.log_text(self.run_id, config_text, "config.yaml")

    def log_scalars(self, scalars: dict[str, float], step: int) -> None:
        if self.run_id is None:  # not opened: the server did not answer (required: false)
            return
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(mlflow_key(tag), float(value), now, step) for tag, value in scalars.items()]
        for start in range(0, len(metrics), 1000):  # MLflow's limit per batch
            self.client.log_batch(self.run_id, metrics=metrics[start:start + 1000])

    def log_image(self, tag: str, image: torch.Tensor, step: int) -> None:
        if self.run_id is None:  # not opened: the server did not answer (required: false)
            return
        array = (image.detach().float().clamp(0, 1).permute(1, 2, 0).cpu().numpy() * 255).round().astype("uint8")
        self.client.log_image(self.run_id, array, key=mlflow_key(tag), step=step)

    def log_hparams(self, settings: dict, metrics: dict[str, float]) -> None:
        if self.run_id is None:  # not opened: the server did not answer (required: false)
            return
        from mlflow.entities import Param
        from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH

        params = [Param(mlflow_key(k), str(v)[:MAX_PARAM_VAL_LENGTH]) for k, v in settings.items()]
        for start in range(0, len(params), 100):  # MLflow's limit per batch
            self.client.log_batch(self.run_id, params=params[start:start + 100])

    def close(self, status: str) -> None:
        if self.run_id is not None:
            self.client.set_terminated(self.run_id, STATUS[status])
