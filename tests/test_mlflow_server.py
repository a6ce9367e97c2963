"""The mlflow logger against tracking servers that are not there (framework/engine/loggers/
reachability.py): a local port nobody listens on and a socket that accepts and never answers
end start-up within the configured seconds in one line naming the URI, or, with `required:
false`, the run goes on without the logger; and a resumed run on another tracking store starts
a run there instead of reusing the recorded id (which only the first store has)."""

import http.server
import json
import os
import socket
import threading
import time

import pytest

from framework.engine.loggers.mlflow_logger import RUN_RECORD
from framework.errors import ConfigError
from framework.registry import LOGGERS
from support import REPO, call_tool

CONFIG = REPO / "configs/segmentation/unet_shapes.yaml"
ADVICE = "(check tracking_uri / MLFLOW_TRACKING_URI; a longer timeout; or required: false to train without it)"


@pytest.fixture
def closed_port():
    """A local port that nobody listens on (bound once to pick it, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def silent_server():
    """A listening socket that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def answering_server():
    """An HTTP server that answers every request with 404 (as a server without that path would)."""
    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the standard library's name)
            self.send_error(404)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), NotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def build(**keywords):
    return LOGGERS.build({"type": "mlflow", **keywords}, path="loggers[1]")


def test_a_port_nobody_listens_on_is_one_line_at_once(closed_port):
    uri = f"http://127.0.0.1:{closed_port}"
    start = time.monotonic()
    with pytest.raises(ConfigError) as error:
        build(tracking_uri=uri, timeout=30)
    assert time.monotonic() - start < 10  # refused: no need to wait out the timeout
    assert str(error.value).startswith(f"loggers[1] (mlflow): tracking server {uri}: cannot connect (")
    assert str(error.value).endswith(ADVICE) and "\n" not in str(error.value)


def build_within(seconds, **keywords):
    """build(**keywords) in a thread given `seconds`: a hang fails the test instead of stalling it.
    Returns (the exception it raised or None, seconds it took)."""
    outcome = {}

    def target():
        start = time.monotonic()
        try:
            build(**keywords)
        except Exception as err:  # noqa: BLE001 (handed to the test)
            outcome["error"] = err
        outcome["elapsed"] = time.monotonic() - start

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"building the mlflow logger still waits after {seconds} s"
    return outcome.get("error"), outcome["elapsed"]


def test_a_server_that_never_answers_fails_after_the_timeout(silent_server):
    error, elapsed = build_within(20, tracking_uri=silent_server, timeout=0.5)
    assert 0.5 <= elapsed < 10
    assert isinstance(error, ConfigError)
    assert str(error) == f"loggers[1] (mlflow): tracking server {silent_server}: no answer within 0.5 s {ADVICE}"


def test_the_environment_variable_uri_is_asked_too(silent_server, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", silent_server)
    with pytest.raises(ConfigError, match=f"tracking server {silent_server}: no answer within 0.2 s"):
        build(timeout=0.2)


def test_a_server_that_answers_even_with_an_error_status_is_reachable(answering_server, framework_log):
    mlflow = build(tracking_uri=answering_server, timeout=5)
    assert mlflow.enabled and mlflow.takes_images
    assert f"mlflow: asking the tracking server {answering_server} (timeout 5 s)" in framework_log.text


def test_not_required_goes_on_without_the_logger(silent_server, tmp_path, framework_log):
    mlflow = build(tracking_uri=silent_server, timeout=0.2, required=False)
    assert f"mlflow: tracking server {silent_server}: no answer within 0.2 s; training without the mlflow " \
           "logger (required: false)" in framework_log.text
    assert not mlflow.enabled and not mlflow.takes_images
    mlflow.open(tmp_path, "seed: 0\n", None)
    mlflow.log_scalars({"train/loss": 1.0}, 1)
    mlflow.log_hparams({"optim.lr": 0.1}, {})
    mlflow.close("finished")
    assert list(tmp_path.iterdir()) == []  # no record, no store


@pytest.mark.parametrize("timeout", [0, -1, "10", True])
def test_timeout_must_be_positive_seconds(timeout):
    with pytest.raises(ConfigError, match=r"^loggers\[1\] \(mlflow\): timeout must be a number of seconds > 0"):
        build(timeout=timeout)


def test_train_stops_in_one_line_before_writing_anything(silent_server, tmp_path):
    work_dir = tmp_path / "run"
    result = call_tool("train", "--config", CONFIG, "--work-dir", work_dir,
                       f"loggers=[{{type: mlflow, tracking_uri: '{silent_server}', timeout: 0.3}}]")
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"error: loggers[0] (mlflow): tracking server {silent_server}: no answer within 0.3 s {ADVICE}"]
    assert [p.name for p in work_dir.rglob("*") if p.suffix != ".log"] == []


def runs_in(store):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=store.as_uri())
    return {run.info.run_id: run.info.status for e in client.search_experiments()
            for run in client.search_runs([e.experiment_id])}


def test_a_run_resumed_on_another_tracking_store_starts_a_run_there(tmp_path, monkeypatch, framework_log):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    work_dir, other_store = tmp_path / "run", tmp_path / "other_store"
    work_dir.mkdir()
    first = build()
    first.open(work_dir, "seed: 0\n", None)
    first.close("stopped")
    first_id = json.loads((work_dir / RUN_RECORD).read_text())["run_id"]

    same = build()  # resumed on the same store: the same run continues
    same.open(work_dir, "seed: 0\n", resumed_iter=2)
    assert same.run_id == first_id
    same.close("stopped")

    moved = build(tracking_uri=other_store.as_uri())  # resumed on another store: a new run there
    moved.open(work_dir, "seed: 0\n", resumed_iter=2)
    assert f"mlflow: the recorded run {first_id} belongs to the tracking store in the work dir; starting a new " \
           f"run in {other_store.as_uri()}" in framework_log.text
    moved.log_scalars({"train/loss": 0.5}, 3)
    moved.close("finished")
    record = json.loads((work_dir / RUN_RECORD).read_text())
    assert record["tracking_uri"] == other_store.as_uri() and record["run_id"] != first_id
    assert runs_in(other_store) == {record["run_id"]: "FINISHED"}
    assert runs_in(work_dir / "mlruns") == {first_id: "KILLED"}  # the first store's run left as it was
    assert os.environ.get("MLFLOW_TRACKING_URI") is None


def test_a_server_that_answers_but_refuses_the_requests_fails_at_open_in_one_line(answering_server, tmp_path):
    mlflow = build(tracking_uri=answering_server, timeout=5)
    start = time.monotonic()
    with pytest.raises(ConfigError) as error:
        mlflow.open(tmp_path, "seed: 0\n", None)
    assert time.monotonic() - start < 30  # a 404 is not retried
    assert str(error.value).startswith(f"mlflow logger: tracking store {answering_server}: ")
    assert str(error.value).endswith("(required: false trains without it)") and "\n" not in str(error.value)
    assert not (tmp_path / RUN_RECORD).exists()


def test_not_required_goes_on_when_the_server_refuses_the_requests(answering_server, tmp_path,
                                                                   framework_log):
    mlflow = build(tracking_uri=answering_server, timeout=5, required=False)
    mlflow.open(tmp_path, "seed: 0\n", None)
    assert f"mlflow: tracking store {answering_server}: " in framework_log.text
    assert "(required: false)" in framework_log.text
    assert not mlflow.enabled and not mlflow.takes_images and mlflow.run_id is None
    mlflow.log_scalars({"train/loss": 1.0}, 1)
    mlflow.close("finished")
