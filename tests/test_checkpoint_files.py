"""framework/checkpoint/files.py called directly (no training run): atomic writes and their
failures, the refusals of read_weights_file with their messages, `latest`, the choice of the
checkpoint to resume from and retention. Written against the survivors of
`python tests/scripts/mutation.py checkpoint.files`; tests/test_checkpoints.py covers the same
through real runs."""

import datetime
import decimal
import errno
import fractions
import io
import os
import pickle
import re
import subprocess
import sys
import zipfile
from pathlib import Path, PurePosixPath

import pytest
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from framework.checkpoint import files as ckpt
from framework.errors import CheckpointError
from framework.serialization import weights_file

ENOSPC = os.strerror(errno.ENOSPC)


def exactly(text):
    return f"^{re.escape(text)}$"


NOT_A_CHECKPOINT = b"not a checkpoint\n"  # torch.load: an UnpicklingError, so the message has no detail


def training_state(iteration):
    return {"meta": {"iter": iteration}, "task": {"w": torch.full((2,), float(iteration))}, "optim": {}, "rng": {}}


def checkpoints(folder, *iterations, latest=None):
    for it in iterations:
        ckpt.save_checkpoint(training_state(it), folder / f"iter_{it}.pth")
    if latest is not None:
        ckpt.write_latest(folder, latest)
    return folder


# ----------------------------------------------------------------------------- writing


def test_atomic_write_creates_the_folders_and_leaves_only_the_final_file(tmp_path):
    path = tmp_path / "new" / "nested" / "file.bin"
    ckpt.atomic_write_bytes(path, lambda f: f.write(b"abc"))
    assert path.read_bytes() == b"abc" and os.listdir(path.parent) == ["file.bin"]


def test_a_saved_state_keeps_its_structure_and_layer_versions(tmp_path):
    """save_checkpoint moves tensors to the CPU (tests/test_cuda.py checks it from a GPU) and
    keeps the rest as it was: containers' types and a state_dict's `_metadata` (the layer
    versions BatchNorm's loading reads)."""
    network = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2))
    state = {"task": network.state_dict(), "optim": {"param_groups": [{"params": [0, 1]}]},
             "pair": (torch.ones(2), 3), "step": 7}
    ckpt.save_checkpoint(state, tmp_path / "c.pth")
    loaded = torch.load(tmp_path / "c.pth", weights_only=True)
    assert type(loaded["task"]) is type(state["task"]) and loaded["task"]._metadata == state["task"]._metadata
    assert loaded["optim"] == state["optim"] and loaded["step"] == 7 and isinstance(loaded["pair"], tuple)
    for key, value in state["task"].items():
        assert torch.equal(loaded["task"][key], value), key


def test_a_failed_write_keeps_the_previous_file_and_removes_the_temp_file(tmp_path):
    path = tmp_path / "file.bin"
    path.write_bytes(b"old")

    def fails(f):
        f.write(b"half")
        raise ValueError("stopped")

    with pytest.raises(ValueError, match="stopped"):
        ckpt.atomic_write_bytes(path, fails)
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["file.bin"]


class FullDisk(io.FileIO):
    """A file on a disk with `room` bytes left (class attribute): a write past it fails with ENOSPC."""

    room = 0

    def write(self, data):
        if self.tell() + len(data) > self.room:
            raise OSError(errno.ENOSPC, ENOSPC)
        return super().write(data)


@pytest.mark.parametrize("room", [0, 16 << 10], ids=["full_before_the_write", "full_during_the_write"])
def test_a_full_disk_is_an_oserror_naming_the_checkpoint(tmp_path, monkeypatch, room):
    # Part-way through, torch's zip writer turns the ENOSPC into a RuntimeError about file
    # positions; the error must still be the disk's, naming the file.
    path = tmp_path / "iter_4.pth"
    ckpt.save_checkpoint(training_state(2), path)
    monkeypatch.setattr(FullDisk, "room", room)
    monkeypatch.setattr(ckpt, "open", FullDisk, raising=False)  # files.py's open(tmp, "wb")
    with pytest.raises(OSError) as err:
        ckpt.save_checkpoint({"w": torch.zeros(64 << 10)}, path)  # 256 KiB
    assert (err.value.errno, err.value.strerror, err.value.filename) == (errno.ENOSPC, ENOSPC, str(path))
    assert str(err.value) == f"[Errno {errno.ENOSPC}] {ENOSPC}: '{path}'"
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["iter_4.pth"] and ckpt.load_checkpoint(path)["meta"] == {"iter": 2}


def test_an_error_of_torch_save_itself_is_not_taken_for_a_disk_error(tmp_path, monkeypatch):
    def broken_save(state, f):
        raise RuntimeError("not about the file")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(RuntimeError, match="^not about the file$"):
        ckpt.save_checkpoint({}, tmp_path / "iter_1.pth")


def test_stale_temp_files_of_dead_writers_are_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)  # exited: no process has this id now (ids are not reused this fast)
    names = [f".iter_2.pth.tmp-{dead_pid}", f".iter_4.pth.tmp-{os.getpid()}", f".iter_6.pth.tmp-{os.getppid()}",
             "iter_2.pth", f"iter_8.pth.tmp-{dead_pid}"]
    for name in names:
        (tmp_path / name).write_bytes(b"")
    assert ckpt.remove_stale_temp_files(tmp_path) == [tmp_path / names[0]]
    assert sorted(os.listdir(tmp_path)) == sorted(names[1:])
    assert ckpt.remove_stale_temp_files(tmp_path / "missing") == []


def test_asking_whether_a_process_is_alive_sends_it_no_signal(tmp_path):
    # The child takes every signal's default action (a test runner may ignore SIGHUP: nohup)
    # and says when it is ready, so that a signal sent by mistake would end it.
    code = ("import signal, sys, time\n"
            "for number in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):\n"
            "    signal.signal(number, signal.SIG_DFL)\n"
            "print('ready', flush=True)\n"
            "time.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "ready\n"
        assert ckpt.process_alive(child.pid)
        with pytest.raises(subprocess.TimeoutExpired):  # still running: not hung up, not killed
            child.wait(timeout=0.5)
    finally:
        child.kill()
        child.wait()


class LostMount(io.FileIO):
    """A file whose writes fail with an OSError that has a text but no errno."""

    def write(self, data):
        raise OSError("the mount went away")


def test_a_write_error_without_an_errno_keeps_its_text_and_names_the_file(tmp_path, monkeypatch):
    path = tmp_path / "iter_1.pth"
    monkeypatch.setattr(ckpt, "open", LostMount, raising=False)
    with pytest.raises(OSError) as err:
        ckpt.save_checkpoint({"w": torch.ones(2)}, path)
    assert (err.value.errno, err.value.strerror, err.value.filename) == (None, "the mount went away", str(path))
    assert os.listdir(tmp_path) == []


def test_a_process_of_another_user_counts_as_alive(monkeypatch):
    def refused(pid, signal):
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "kill", refused)
    assert ckpt.process_alive(1)


# ----------------------------------------------------------------------------- reading


def test_unreadable_files_are_one_line_naming_them(tmp_path):
    with pytest.raises(CheckpointError, match=exactly(
            f"{tmp_path} is a directory, not a checkpoint file (a run's checkpoints are "
            "<work_dir>/checkpoints/iter_<N>.pth; --resume alone takes the latest)")):
        ckpt.read_weights_file(tmp_path)
    with pytest.raises(CheckpointError, match=exactly(f"checkpoint not found: {tmp_path / 'none.pth'}")):
        ckpt.read_weights_file(tmp_path / "none.pth")
    text = tmp_path / "notes.pth"
    text.write_bytes(NOT_A_CHECKPOINT)
    with pytest.raises(CheckpointError, match=exactly(
            f"cannot load {text}: not a PyTorch checkpoint, or a corrupt or truncated one")):
        ckpt.read_weights_file(text)
    tensor = tmp_path / "tensor.pth"
    torch.save(torch.ones(2), tensor)
    with pytest.raises(CheckpointError, match=exactly(f"{tensor} holds a Tensor, expected a dict")):
        ckpt.read_weights_file(tensor)


def test_a_truncated_checkpoint_names_the_error_type_and_torchs_first_sentences(tmp_path):
    # torch 2.14's first line for a damaged zip archive is 337 characters: the message keeps its
    # whole sentences up to 200 characters and closes its parenthesis, whatever the path's length.
    folder = tmp_path / ("d" * 220)
    folder.mkdir()
    path = folder / "iter_2.pth"
    ckpt.save_checkpoint(training_state(2), path)
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(CheckpointError) as err:
        ckpt.read_weights_file(path)
    try:
        torch.load(path, weights_only=True)
    except RuntimeError as torch_error:
        first_line = str(torch_error).strip().splitlines()[0]
    prefix = f"cannot load {path}: not a PyTorch checkpoint, or a corrupt or truncated one (RuntimeError: "
    message = str(err.value)
    assert message.startswith(prefix) and message.endswith(")"), message
    detail = message[len(prefix):-1]
    assert first_line.startswith(detail) and len(detail) <= 200, detail
    if len(first_line) > 200:  # cut after a whole sentence
        assert detail.endswith(".") and first_line[len(detail)] == " ", detail
    else:
        assert detail == first_line


@pytest.mark.parametrize(("text", "expected"), [
    ("Short enough.", "Short enough."),
    ("First sentence. " + "x" * 250, "First sentence."),
    ("A. B. " + "y" * 250, "A. B."),
    ("A. " + "y" * 250, "A."),
    ("z" * 250, "z" * 197 + "..."),
    ("z" * 200, "z" * 200),  # at the limit: whole
    (". " + "z" * 250, ". " + "z" * 195 + "..."),  # no sentence before the first ". "
])
def test_long_details_are_cut_after_a_whole_sentence(text, expected):
    assert weights_file._whole_sentences(text) == expected


def test_the_first_line_of_an_error_or_its_type_when_it_has_no_text():
    assert weights_file._first_line(ValueError("  first\nsecond")) == "first"
    assert weights_file._first_line(RuntimeError("")) == "RuntimeError"


def test_safetensors_are_read_and_a_damaged_one_is_named(tmp_path):
    path = tmp_path / "w.safetensors"
    save_file({"w": torch.ones(3)}, path)
    assert torch.equal(ckpt.read_weights_file(path)["w"], torch.ones(3))
    path.write_bytes(path.read_bytes()[:20])
    with pytest.raises(SafetensorError) as own:  # safetensors' wording differs between versions
        load_file(path)
    with pytest.raises(CheckpointError, match=exactly(f"cannot load {path}: {str(own.value).splitlines()[0]}")):
        ckpt.read_weights_file(path)


def test_a_weights_file_is_not_a_training_checkpoint(tmp_path):
    path = tmp_path / "weights.pth"
    torch.save({"meta": {}, "task": {}}, path)
    with pytest.raises(CheckpointError, match=exactly(
            f"{path} is not a training checkpoint of this framework (it has no optim, rng); use load_from for weights")):
        ckpt.load_checkpoint(path)


def test_task_weights_of_another_config_are_one_line(tmp_path):
    task = torch.nn.Linear(2, 3)
    with pytest.raises(CheckpointError) as err:
        ckpt.load_task_weights(task, {"task": torch.nn.Linear(2, 4).state_dict()}, "iter_2.pth")
    message = str(err.value)
    assert message.startswith("iter_2.pth does not fit this config's task: Error(s) in loading state_dict for Linear: "
                              "size mismatch for weight: copying a param with shape torch.Size([4, 2])")
    assert "\n" not in message and "  " not in message and len(message) <= len("iter_2.pth does not fit this config's task: ") + 300
    with pytest.raises(CheckpointError, match=r"^iter_2.pth does not fit this config's task: 'task'$"):
        ckpt.load_task_weights(task, {}, "iter_2.pth")
    ckpt.load_task_weights(task, {"task": {"weight": torch.ones(3, 2), "bias": torch.zeros(3)}}, "iter_2.pth")
    assert torch.equal(task.weight.detach(), torch.ones(3, 2))


# ----------------------------------------------------------------------------- latest, resume, retention


def test_iteration_checkpoints_in_numeric_order_and_nothing_else(tmp_path):
    for name in ["iter_10.pth", "iter_9.pth", "best.pth", "iter_2.pth.tmp", "latest", ".iter_3.pth.tmp-1", "iter_x.pth"]:
        (tmp_path / name).write_bytes(b"")
    assert [p.name for p in ckpt.iteration_checkpoints(tmp_path)] == ["iter_9.pth", "iter_10.pth"]
    assert ckpt.iteration_checkpoints(tmp_path / "missing") == []


@pytest.mark.parametrize("content", [b"", b"best.pth", b"\xff\xfe", b"iter_2.pth; rm -rf"])
def test_a_damaged_latest_is_ignored_with_a_warning(tmp_path, framework_log, content):
    (tmp_path / "latest").write_bytes(content)
    assert ckpt.read_latest(tmp_path) is None
    assert framework_log.messages == [
        f"warning: {tmp_path / 'latest'} does not name a checkpoint (iter_<N>.pth); ignoring it"]


def test_latest_is_read_back_and_comes_first(tmp_path):
    checkpoints(tmp_path, 2, 4, 6, latest="iter_4.pth")
    assert (tmp_path / "latest").read_bytes() == b"iter_4.pth"
    assert ckpt.read_latest(tmp_path) == tmp_path / "iter_4.pth"
    (tmp_path / "latest").write_bytes(b"iter_4.pth\n")  # written by hand
    assert [p.name for p in ckpt.resume_candidates(tmp_path)] == ["iter_4.pth", "iter_6.pth", "iter_2.pth"]
    assert ckpt.read_latest(tmp_path / "missing") is None


def test_the_latest_readable_checkpoint_is_resumed_skipping_damaged_ones(tmp_path, framework_log):
    checkpoints(tmp_path, 2, 4, 6, latest="iter_6.pth")
    (tmp_path / "iter_6.pth").write_bytes(NOT_A_CHECKPOINT)
    path, state = ckpt.load_latest_checkpoint(tmp_path)
    assert path == tmp_path / "iter_4.pth" and state["meta"] == {"iter": 4}
    assert framework_log.messages == [
        f"warning: skipping unreadable checkpoint: cannot load {tmp_path / 'iter_6.pth'}: not a PyTorch checkpoint, "
        "or a corrupt or truncated one; trying iter_4.pth"]


def test_no_readable_checkpoint_is_an_error_and_none_at_all_is_none(tmp_path, framework_log):
    assert ckpt.load_latest_checkpoint(tmp_path) is None
    for it in (2, 4):
        (tmp_path / f"iter_{it}.pth").write_bytes(NOT_A_CHECKPOINT)
    with pytest.raises(CheckpointError, match=exactly(f"no readable checkpoint in {tmp_path} (tried iter_4.pth, iter_2.pth)")):
        ckpt.load_latest_checkpoint(tmp_path)
    assert [m.rsplit("; ", 1)[1] for m in framework_log.messages] == ["trying iter_2.pth", "no older one left"]


class TouchesFile:
    """Unpickling this creates a file (Path.touch): a harmless stand-in for code run by a pickle."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return Path.touch, (self.path,)


def test_a_pickled_object_is_refused_and_never_unpickled(tmp_path):
    marker = tmp_path / "created_by_unpickling"
    path = tmp_path / "evil.pth"
    torch.save({"w": torch.ones(1), "x": TouchesFile(marker)}, path)
    with pytest.raises(ckpt.UnsafeCheckpointError, match=exactly(
            f"refused to load {path}: it holds pickled objects (__builtin__.getattr, pathlib.Path, pathlib.PosixPath) "
            "besides tensors and plain containers, and unpickling them could run code; re-save it as a state dict of tensors")):
        ckpt.read_weights_file(path)
    assert not marker.exists()


def test_a_refusal_names_the_first_three_objects_and_counts_the_others(tmp_path):
    path = tmp_path / "objects.pth"
    torch.save({"a": fractions.Fraction(1, 2), "b": datetime.date(2020, 1, 1), "c": PurePosixPath("x"),
                "d": decimal.Decimal("1")}, path)
    with pytest.raises(ckpt.UnsafeCheckpointError, match=re.escape(
            "pickled objects (fractions.Fraction, datetime.date, pathlib.PurePosixPath and 1 more) besides")):
        ckpt.read_weights_file(path)


class CallsTorchHubLoad:
    """Unpickling this would call torch.hub.load (a download and its code run): never called here."""

    def __reduce__(self):
        return torch.hub.load, ("someone/repo", "model")


@pytest.mark.parametrize("make, named", [
    (lambda: torch.nn.Conv2d(3, 4, 3), "torch.nn.modules.conv.Conv2d"),  # torch.save(model), not its state dict
    (lambda: {"optimizer": torch.optim.SGD}, "torch.optim.sgd.SGD"),
    (lambda: {"w": CallsTorchHubLoad()}, "torch.hub.load"),
], ids=["module", "optimizer_class", "torch_hub_load"])
def test_an_object_from_torch_is_refused_and_named_not_taken_for_a_corrupt_file(tmp_path, make, named):
    # torch's weights-only loader refuses these; a name starting with `torch.` is no proof of a tensor
    path = tmp_path / "object.pth"
    torch.save(make(), path)
    with pytest.raises(ckpt.UnsafeCheckpointError, match=f"^refused to load {re.escape(str(path))}: it holds "
                                                         f"pickled objects \\({re.escape(named)}\\) besides"):
        ckpt.read_weights_file(path)


@pytest.mark.filterwarnings("ignore::UserWarning")  # TypedStorage and sparse-validation notices of torch itself
@pytest.mark.parametrize("legacy_format", [False, True], ids=["zip", "legacy"])
@pytest.mark.parametrize("protocol", [2, 4])  # torch.save's default, and STACK_GLOBAL with the memo
def test_tensors_of_every_kind_in_plain_containers_have_no_unsafe_globals(tmp_path, legacy_format, protocol):
    from collections import Counter, OrderedDict

    from framework.serialization.pickle_globals import scan_pickles, unsafe_globals

    dtypes = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
              torch.int32, torch.int64, torch.bool, torch.complex64]
    state = {
        "tensors": [torch.zeros(2, dtype=dtype) for dtype in dtypes],
        "dtypes": dtypes, "size": torch.Size([2, 3]), "device": torch.device("cpu"),
        "parameter": torch.nn.Parameter(torch.ones(3)), "state_dict": torch.nn.Linear(2, 2).state_dict(),
        "quantized": torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.quint8),
        "sparse": torch.eye(2).to_sparse(), "containers": (OrderedDict(a=1), Counter("ab"), {1, 2}, b"\x00", 1.5j),
    }
    path = tmp_path / "plain.pth"
    torch.save(state, path, _use_new_zipfile_serialization=not legacy_format, pickle_protocol=protocol)
    scan = scan_pickles(path)
    assert scan.parsed and "torch._utils._rebuild_tensor_v2" in scan.globals and "torch.bfloat16" in scan.globals
    assert scan.protocol == protocol and unsafe_globals(scan) == []
    if protocol == 2:
        assert ckpt.read_weights_file(path).keys() == state.keys()  # torch's weights-only loader agrees
    else:  # torch 2.14's weights-only loader stops at protocol 4's FRAME opcode: said as such, not "corrupt"
        with pytest.raises(CheckpointError, match=exactly(
                f"cannot load {path}: it was saved with pickle protocol 4 (torch.save(..., pickle_protocol=4)), "
                "which torch's weights-only loader does not read; save it again with torch.save's default protocol")):
            ckpt.read_weights_file(path)


@pytest.mark.parametrize("protocol", [4, 5])
def test_objects_named_through_the_memo_in_protocol_4_and_5(tmp_path, protocol):
    # STACK_GLOBAL takes its module and name from the stack; a module named a second time comes
    # from the memo (BINGET), as pickle writes it for datetime.time after datetime.date
    path = tmp_path / "objects.pt"
    path.write_bytes(pickle.dumps({"a": datetime.date(2020, 1, 1), "b": datetime.time(1, 2), "w": 1.0},
                                  protocol=protocol))
    with pytest.raises(ckpt.UnsafeCheckpointError, match=re.escape("pickled objects (datetime.date, datetime.time) besides")):
        ckpt.read_weights_file(path)
    zipped = tmp_path / "objects.pth"
    torch.save({"w": torch.ones(2), "a": datetime.date(2020, 1, 1), "b": datetime.time(1, 2)}, zipped,
               pickle_protocol=protocol)
    with pytest.raises(ckpt.UnsafeCheckpointError, match=re.escape("pickled objects (datetime.date, datetime.time) besides")):
        ckpt.read_weights_file(zipped)


def test_a_bare_object_at_protocol_4_is_named(tmp_path):
    path = tmp_path / "bare.pt"  # the pickle is the global alone: its two strings are all there is on the stack
    path.write_bytes(pickle.dumps(datetime.date, protocol=4))
    with pytest.raises(ckpt.UnsafeCheckpointError, match=re.escape("pickled objects (datetime.date) besides")):
        ckpt.read_weights_file(path)


@pytest.mark.parametrize("put, get", [
    (b"p0\n", b"g0\n"),  # protocol 0's text PUT / GET
    (b"q\x00", b"h\x00"),  # BINPUT / BINGET
    (b"r\x00\x00\x00\x00", b"j\x00\x00\x00\x00"),  # LONG_BINPUT / LONG_BINGET
], ids=["put", "binput", "long_binput"])
def test_a_module_name_kept_in_the_memo_is_found(tmp_path, put, get):
    # a hand-made pickle: 'os' stored in the memo and dropped, fetched back for STACK_GLOBAL
    path = tmp_path / "memo.pt"
    path.write_bytes(b"\x80\x04\x8c\x02os" + put + b"0" + get + b"\x8c\x06system\x93.")
    with pytest.raises(ckpt.UnsafeCheckpointError, match=re.escape("pickled objects (os.system) besides")):
        ckpt.read_weights_file(path)


@pytest.mark.parametrize("damage", ["truncated_pickle", "bad_crc"])
def test_a_damaged_pickle_in_a_zip_is_not_a_checkpoint_whatever_it_names(tmp_path, damage):
    path = tmp_path / "damaged.pth"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", b"\x80\x02cos\nsystem\nq\x00" if damage == "truncated_pickle"
                         else b"\x80\x02cos\nsystem\nq\x00.")
    if damage == "bad_crc":  # one byte of the stored pickle changed: reading it fails its CRC check
        data = bytearray(path.read_bytes())
        data[data.index(b"system")] ^= 1
        path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError) as error:
        ckpt.read_weights_file(path)
    assert not isinstance(error.value, ckpt.UnsafeCheckpointError)
    assert str(error.value).startswith(f"cannot load {path}: not a PyTorch checkpoint, or a corrupt or truncated one")


def test_a_zip_missing_a_tensors_bytes_is_corrupt_not_unsafe_or_of_another_protocol(tmp_path):
    whole, damaged = tmp_path / "whole.pth", tmp_path / "damaged.pth"
    torch.save({"w": torch.ones(3)}, whole)
    with zipfile.ZipFile(whole) as source, zipfile.ZipFile(damaged, "w") as target:
        for name in source.namelist():
            if "/data/" not in name:  # its pickle intact, the tensor's storage record gone
                target.writestr(name, source.read(name))
    with pytest.raises(CheckpointError, match=f"^cannot load {re.escape(str(damaged))}: not a PyTorch checkpoint, "
                                              "or a corrupt or truncated one \\(RuntimeError: ") as error:
        ckpt.read_weights_file(damaged)
    assert not isinstance(error.value, ckpt.UnsafeCheckpointError)


def test_an_object_after_the_legacy_formats_header_pickles_is_named(tmp_path):
    # torch.save's legacy format writes three small pickles (magic number, version, system info) first
    path = tmp_path / "legacy.pth"
    torch.save({"w": torch.ones(2), "when": datetime.date(2020, 1, 1)}, path, _use_new_zipfile_serialization=False)
    with pytest.raises(ckpt.UnsafeCheckpointError, match=re.escape("pickled objects (datetime.date) besides")):
        ckpt.read_weights_file(path)


@pytest.mark.parametrize("name", ["load", "save", "compile"])
def test_a_function_of_the_torch_module_is_named(tmp_path, name):
    path = tmp_path / "calls_torch.pth"
    path.write_bytes(b"\x80\x02ctorch\n" + name.encode() + b"\nq\x00.")  # a pickle naming torch.<name>
    with pytest.raises(ckpt.UnsafeCheckpointError, match=re.escape(f"pickled objects (torch.{name}) besides")):
        ckpt.read_weights_file(path)


def test_every_pickle_of_a_zip_archive_is_read(tmp_path):
    path = tmp_path / "two_pickles.pth"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/extra.pkl", b"\x80\x02cos\nsystem\nq\x00.")
        archive.writestr("archive/data.pkl", pickle.dumps({"when": datetime.date(2020, 1, 1)}, protocol=2))
    with pytest.raises(ckpt.UnsafeCheckpointError, match=re.escape("pickled objects (os.system, datetime.date) besides")):
        ckpt.read_weights_file(path)


@pytest.mark.filterwarnings("ignore::FutureWarning")  # torch 2.14 calls torch.jit deprecated; export still writes it
def test_a_torchscript_archive_is_named_as_one(tmp_path):
    path = tmp_path / "model.pt"  # what tools/export.py writes
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), path)
    with pytest.raises(ckpt.UnsafeCheckpointError, match=exactly(
            f"refused to load {path}: it is a TorchScript archive (a model's code and weights, as torch.jit.save "
            "and tools/export.py write), not a checkpoint or state dict; give the .pth checkpoint it was exported from")):
        ckpt.read_weights_file(path)


def test_a_refused_checkpoint_stops_the_search(tmp_path):
    checkpoints(tmp_path, 2)
    with open(tmp_path / "iter_4.pth", "wb") as f:
        f.write(b"\x80\x02cos\nsystem\nq\x00.")  # a pickle naming os.system
    with pytest.raises(ckpt.UnsafeCheckpointError, match=f"^refused to load {re.escape(str(tmp_path / 'iter_4.pth'))}"):
        ckpt.load_latest_checkpoint(tmp_path)


def test_retention_keeps_the_newest_and_deletes_an_abandoned_trajectory_first(tmp_path):
    for name in ["iter_2.pth", "iter_4.pth", "iter_6.pth", "iter_8.pth", "best.pth"]:
        (tmp_path / name).write_bytes(b"")
    ckpt.prune(tmp_path, 0)
    assert len(os.listdir(tmp_path)) == 5
    # resumed from iter_4 and now at iteration 5: iter_6 and iter_8 are the abandoned run's
    (tmp_path / "iter_5.pth").write_bytes(b"")
    ckpt.prune(tmp_path, 2, current_iter=5)
    assert sorted(os.listdir(tmp_path)) == ["best.pth", "iter_4.pth", "iter_5.pth"]
    ckpt.prune(tmp_path, 1)
    assert sorted(os.listdir(tmp_path)) == ["best.pth", "iter_5.pth"]
