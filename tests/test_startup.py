"""Start-up: the tools read and validate a config before importing torch, the engine imports
no torchvision, albumentations or TensorBoard until something needs them, and the garbage
collector stays out of the way of start-up."""

import gc
import json
import subprocess
import sys

from benchmarks.release.startup import UNUSED
from support import REPO, TINY_UNET, call_tool, run_forked_ranks, run_forked_tool

HEAVY = ("torch", "torchvision", "albumentations", "tensorboard", "torch.utils.tensorboard")

PROBE = """
import json, runpy, sys
heavy = lambda: [m for m in {heavy!r} if m in sys.modules]
sys.argv = ["train.py", "--config", {config!r}]
try:
    runpy.run_path({train!r}, run_name="__main__")
except SystemExit as exit:
    status = exit.code
after_error = heavy()
import framework.engine.build
from framework.registry import MODELS, OPTIMIZERS
MODELS.get("UNet"), OPTIMIZERS.get("AdamW")
after_engine = heavy()
from framework.registry import TRANSFORMS
TRANSFORMS.get("HorizontalFlip")
print(json.dumps([status, after_error, after_engine, heavy()]))
"""


def test_config_error_before_torch_and_heavy_imports_only_when_needed(tmp_path):
    config = tmp_path / "typo.yaml"
    config.write_text(f"_base_: {REPO / 'configs/segmentation/unet_shapes.yaml'}\ntrian: {{max_iters: 10}}\n")
    code = PROBE.format(heavy=HEAVY, config=str(config), train=str(REPO / "tools/train.py"))
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr
    status, after_error, after_engine, after_transform = json.loads(result.stdout.splitlines()[-1])
    assert status == 2 and "unknown top-level key 'trian'" in result.stderr
    assert after_error == []  # the config was rejected before torch was imported
    assert after_engine == ["torch"]  # the whole training stack, built-in models and optimizers
    assert "albumentations" in after_transform  # imported by the first transform lookup


NETWORK_PROBE = """
import json, socket
attempts = []
def refuse(*args, **kwargs):
    attempts.append(repr(args[:1]))
    raise OSError("network refused by the test")
socket.create_connection = refuse
socket.socket.connect = refuse
socket.getaddrinfo = refuse
from framework.data.transforms import build_pipeline
build_pipeline([{"type": "HorizontalFlip"}])
print(json.dumps(attempts))
"""


def test_building_a_pipeline_does_not_ask_pypi_for_albumentations_updates():
    # albumentations checks PyPI for a newer version on import unless NO_ALBUMENTATIONS_UPDATE is
    # set: a request per run, rank and spawned worker (up to 2 s each without internet).
    def attempts(**env):
        result = subprocess.run([sys.executable, "-W", "ignore", "-c", NETWORK_PROBE], cwd=REPO, capture_output=True,
                                text=True, timeout=300,
                                env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", **env})
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout.splitlines()[-1])

    assert attempts() == []
    assert attempts(NO_ALBUMENTATIONS_UPDATE="0") != []  # a user's own setting wins (and the probe sees the request)


def test_training_starts_with_start_up_objects_frozen_and_collection_on(tmp_path):
    # tools/train.py run as a program pauses cyclic collection through imports and build
    # (each full collection walks every object torch created), then collects once, freezes
    # what start-up built and turns collection back on for training.
    def collector_at_start(runner, name):
        state = tmp_path / f"{name}.json"
        result = runner("train", "--config", REPO / "configs/segmentation/unet_shapes.yaml", "--work-dir",
                        tmp_path / name, *TINY_UNET, "data.train.num_workers=0", "train.max_iters=1",
                        "train.val_interval=0", "custom_imports=[probes]",
                        f"hooks=[{{type: CollectorStateHook, path: '{state}'}}]",
                        **({"folder": tmp_path} if runner is run_forked_tool else {}))
        assert result.returncode == 0, result.stderr
        return json.loads(state.read_text())

    as_program = collector_at_start(run_forked_tool, "program")
    assert as_program["enabled"] and as_program["frozen"] > 100_000  # torch's modules, the networks
    frozen_before = gc.get_freeze_count()
    # main() called in-process (as tests and notebooks do) keeps Python's defaults: nothing frozen
    in_process = collector_at_start(call_tool, "in_process")
    assert in_process["enabled"] and in_process["frozen"] <= frozen_before
    # and what the caller froze stays frozen (the suite's workers freeze torch after collection;
    # frozen objects whose last reference goes are freed all the same, so a little fewer)
    assert frozen_before > 100_000 and gc.get_freeze_count() > frozen_before * 0.9


def test_ddp_wrappers_are_freed_while_the_process_group_is_up(tmp_path):
    # Frozen objects are out of the collector's reach: the wrappers built at start-up must still
    # be released in train.py's own clean-up, before it destroys the process group (freed at
    # interpreter exit instead, gloo's teardown aborted finished ranks).
    state = tmp_path / "state.json"
    result = run_forked_ranks(2, "train", "--config", REPO / "configs/segmentation/unet_shapes.yaml", "--work-dir",
                              tmp_path / "run", *TINY_UNET, "data.train.num_workers=0", "train.max_iters=2",
                              "train.val_interval=0", "task.model.norm=none", "custom_imports=[probes]",
                              f"hooks=[{{type: CollectorStateHook, path: '{state}'}}]", folder=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    for rank in (0, 1):
        assert (tmp_path / f"state.json.freed.r{rank}").read_text() == "True\n", rank  # one wrapper, group up


RUN_PROBE = """
import json, runpy, sys
sys.argv = ["train.py", "--config", {config!r}, "--work-dir", {work_dir!r}, "device=cpu", "train.max_iters=1",
            "train.val_interval=0", "train.ckpt_interval=0", "train.progress_bar=false",
            "data.train.dataset.num_samples=16", "data.val.dataset.num_samples=8"]
try:
    runpy.run_path({train!r}, run_name="__main__")
except SystemExit as exit:
    assert not exit.code, exit.code
loaded = sorted({{name.split(".")[0] for name in sys.modules}})
import albumentations.core.hub_mixin as hub
print(json.dumps([loaded, hub.is_huggingface_hub_available]))
"""


def test_a_segmentation_run_imports_nothing_it_does_not_use(tmp_path):
    code = RUN_PROBE.format(config=str(REPO / "configs/segmentation/unet_shapes.yaml"), work_dir=str(tmp_path / "run"),
                            train=str(REPO / "tools/train.py"))
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    loaded, hub_available = json.loads(result.stdout.splitlines()[-1])
    assert {"torch", "albumentations", "tensorboard"} <= set(loaded)  # the run did build its pipeline and logger
    assert sorted(UNUSED & set(loaded)) == []
    assert hub_available is False  # albumentations went without its Hub mixin


def test_import_without_hides_an_optional_dependency_only_while_the_module_loads(tmp_path, monkeypatch):
    from framework.registry import import_without

    (tmp_path / "optional_dep.py").write_text("")
    (tmp_path / "uses_optional.py").write_text(
        "try:\n    import optional_dep\n    HAVE = True\nexcept ImportError:\n    HAVE = False\n")
    (tmp_path / "uses_loaded.py").write_text("import json\nHAVE = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("optional_dep", "uses_optional", "uses_loaded"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert import_without("uses_optional", ("optional_dep",)).HAVE is False
    assert "optional_dep" not in sys.modules  # the mark is gone: others import it as usual
    assert __import__("optional_dep") is sys.modules["optional_dep"]
    assert import_without("uses_loaded", ("json",)).HAVE is True  # already imported: not hidden
    assert import_without("uses_optional", ("optional_dep",)).HAVE is False  # imported once, kept
