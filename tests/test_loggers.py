"""`loggers: [tensorboard, csv, mlflow]`: one run writes all three, each read back with its own
reader (TensorBoard's EventAccumulator, the csv module, MLflow's client), with the same scalars;
MLflow's default store is a local folder and nothing opens a network connection."""

import csv
import json
import os
import shutil
import socket

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from support import REPO, TINY_UNET, call_tool, train_run

CONFIG = REPO / "configs/segmentation/unet_shapes.yaml"
RUN = [*TINY_UNET, "data.train.num_workers=0", "train.max_iters=4", "train.val_interval=2",
       "train.log_interval=2", "train.ckpt_interval=2", "train.keep_last=0", "train.best_metric=mIoU"]
ALL = "loggers=[tensorboard, csv, {type: mlflow, experiment: shapes, run_name: tiny}]"
TELEMETRY_SWITCHES = ("MLFLOW_DISABLE_TELEMETRY", "MLFLOW_ALLOW_FILE_STORE")


def tensorboard_scalars(work_dir) -> dict:
    events = EventAccumulator(str(work_dir / "tensorboard"), size_guidance={"scalars": 0, "images": 0})
    events.Reload()
    return {(tag, s.step): s.value for tag in events.Tags()["scalars"] for s in events.Scalars(tag)}, events


def csv_scalars(work_dir) -> dict:
    with open(work_dir / "csv/scalars.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    pairs = [(row["tag"], int(row["iter"])) for row in rows]
    assert len(pairs) == len(set(pairs)), "a (tag, iter) logged twice"
    return {(row["tag"], int(row["iter"])): float(row["value"]) for row in rows}


def mlflow_run(work_dir):
    from mlflow.tracking import MlflowClient

    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"  # MLflow 3 refuses its file store without it
    record = json.loads((work_dir / "mlflow_run.json").read_text())
    assert record["tracking_uri"] is None  # by default the store is the folder mlruns in the work dir
    client = MlflowClient(tracking_uri=(work_dir / "mlruns").resolve().as_uri())
    return client, client.get_run(record["run_id"])


@pytest.fixture(scope="module")
def logged_run(tmp_path_factory):
    connections = []
    real_connect = socket.socket.connect

    def refuse(self, address):  # every connection attempt is recorded and fails
        connections.append(address)
        raise OSError(f"test: no network ({address})")

    socket.socket.connect = refuse
    before = {key: os.environ.pop(key, None) for key in TELEMETRY_SWITCHES}
    try:
        work_dir = train_run(tmp_path_factory.mktemp("loggers"), CONFIG, *RUN, ALL)
        # Under pytest MLflow sends no telemetry anyway (it looks for PYTEST_CURRENT_TEST), so
        # the switch a user's run gets is checked itself.
        telemetry = os.environ.get("MLFLOW_DISABLE_TELEMETRY")
    finally:
        socket.socket.connect = real_connect
        for key, value in before.items():
            os.environ.pop(key, None)
            if value is not None:
                os.environ[key] = value
    return work_dir, connections, telemetry


def test_every_logger_gets_the_same_scalars(logged_run):
    work_dir, connections, telemetry = logged_run
    assert connections == [] and telemetry == "true"
    board, _ = tensorboard_scalars(work_dir)
    table = csv_scalars(work_dir)
    assert {("train/loss", 2), ("train/lr", 4), ("val/mIoU", 2), ("val/mIoU", 4), ("best/mIoU", 4),
            ("val_per_class/IoU.circle", 4)} <= set(table)
    assert set(board) == set(table)
    for key, value in table.items():  # TensorBoard keeps float32
        assert board[key] == pytest.approx(value, rel=1e-6, abs=1e-7), key
    client, run = mlflow_run(work_dir)
    assert run.info.status == "FINISHED" and run.info.run_name == "tiny"
    assert client.get_experiment(run.info.experiment_id).name == "shapes"
    logged = {(m.key, m.step): m.value for key in run.data.metrics for m in client.get_metric_history(run.info.run_id, key)}
    assert logged == table
    # metrics.jsonl's evaluation records are the val scalars
    records = [json.loads(line) for line in (work_dir / "metrics.jsonl").read_text().splitlines()]
    assert {r["iter"]: r["mIoU"] for r in records} == {2: table["val/mIoU", 2], 4: table["val/mIoU", 4]}


def test_hparams_images_and_the_config_reach_each_logger(logged_run):
    work_dir, _, _ = logged_run
    config_text = (work_dir / "csv/config.yaml").read_text()
    assert "base_channels: 8" in config_text and "loggers:" in config_text
    hparams = json.loads((work_dir / "csv/hparams.json").read_text())
    assert hparams["settings"]["task.model.type"] == "UNet" and hparams["settings"]["batch_size"] == 4
    assert set(hparams["metrics"]) >= {"val/mIoU", "val/aAcc", "best/mIoU"}

    client, run = mlflow_run(work_dir)
    assert run.data.params["task.model.type"] == "UNet" and run.data.params["batch_size"] == "4"
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert "config.yaml" in artifacts
    local = client.download_artifacts(run.info.run_id, "config.yaml", str(work_dir / "download"))
    assert open(local).read() == config_text
    images = [a.path for a in client.list_artifacts(run.info.run_id, "images")]
    assert any(path.startswith("images/val~confusion_matrix+step+4") for path in images), images

    _, events = tensorboard_scalars(work_dir)
    assert [i.step for i in events.Images("val/confusion_matrix")] == [2, 4]
    assert "config/text_summary" in events.Tags()["tensors"]


def test_a_resumed_run_logs_each_step_once_in_csv_and_continues_the_mlflow_run(logged_run, tmp_path):
    work_dir = tmp_path / "run"
    shutil.copytree(logged_run[0], work_dir)
    uninterrupted = csv_scalars(work_dir)
    run_id = mlflow_run(work_dir)[1].info.run_id
    result = call_tool("train", "--config", CONFIG, "--work-dir", work_dir, *RUN, ALL,
                       "--resume", work_dir / "checkpoints/iter_2.pth")
    assert result.returncode == 0, result.stderr
    resumed = csv_scalars(work_dir)  # steps 3 and 4 dropped on resume and logged again
    assert set(resumed) == set(uninterrupted)
    for key in uninterrupted:
        if not key[0].endswith("_time"):  # timings differ from run to run
            assert resumed[key] == uninterrupted[key], key
    client, run = mlflow_run(work_dir)
    assert run.info.run_id == run_id and run.info.status == "FINISHED"
    steps = [m.step for m in client.get_metric_history(run_id, "val/mIoU")]
    assert sorted(steps) == [2, 4, 4]  # MLflow's history keeps both values of a step logged again


def test_the_best_row_of_the_checkpoint_iteration_survives_a_sigkill_and_the_resume(tmp_path):
    """nothing-silent part 4, item 8: the row best/mIoU at the checkpoint's iteration was still in
    the csv file's buffer when SIGKILL came, and the resumed run does not evaluate that iteration again."""
    from support import fork_tool

    work_dir = tmp_path / "run"
    hook = "hooks=[{type: SigkillAtIterationHook, iteration: 2}]"
    process = fork_tool("train", "--config", CONFIG, "--work-dir", work_dir, *RUN, "loggers=[csv]", hook,
                        "custom_imports=[probes]", cwd=REPO / "tests", log=tmp_path / "killed.log")
    process.join(120)
    assert process.exitcode == -9, (tmp_path / "killed.log").read_text()[-2000:]
    assert ("best/mIoU", 2) in csv_scalars(work_dir)
    result = call_tool("train", "--config", CONFIG, "--work-dir", work_dir, *RUN, "loggers=[csv]", "--resume")
    assert result.returncode == 0, result.stderr
    logged = csv_scalars(work_dir)
    assert {("best/mIoU", 2), ("best/mIoU", 4), ("val/mIoU", 2), ("val/mIoU", 4)} <= set(logged)


def test_no_loggers_and_an_unknown_one(tmp_path):
    quiet = train_run(tmp_path / "quiet", CONFIG, *RUN, "train.max_iters=2", "loggers=[]")
    assert not (quiet / "tensorboard").exists() and not (quiet / "csv").exists()
    assert (quiet / "metrics.jsonl").is_file()
    result = call_tool("train", "--config", CONFIG, "--work-dir", tmp_path / "bad", *RUN, "loggers=[csv, mlfow]")
    assert result.returncode == 2
    assert "loggers[1].type: unknown type 'mlfow' in the loggers registry; did you mean 'mlflow'" in result.stderr
    result = call_tool("train", "--config", CONFIG, "--work-dir", tmp_path / "twice", *RUN, "loggers=[csv, csv]")
    assert result.returncode == 2 and "loggers[1]: 'csv' is listed twice" in result.stderr


def test_mlflow_not_installed_is_one_line_naming_the_extra(monkeypatch):
    import sys

    from framework.errors import ConfigError
    from framework.registry import LOGGERS

    monkeypatch.setitem(sys.modules, "mlflow", None)  # Python's way to make a package unimportable
    with pytest.raises(ConfigError, match=r"loggers\[2\] \(mlflow\): the mlflow logger needs MLflow: "
                                          r"pip install -e '\.\[mlflow\]'"):
        LOGGERS.build({"type": "mlflow"}, path="loggers[2]")
