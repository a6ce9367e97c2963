"""What a pickled checkpoint would import, read with `pickletools` (nothing is unpickled).

When `torch.load(weights_only=True)` refuses a file, this decides whether it was refused for
its content (it names classes or functions beyond tensors and plain containers: unsafe) or
because it is not a readable checkpoint at all (random bytes, truncated). The decision never
depends on the wording of torch's message, which changes between versions.
"""

from __future__ import annotations

import io
import pickletools
import re
import zipfile
from pathlib import Path
from typing import NamedTuple

import torch

# Globals a file of tensors and plain containers is written with: the containers (OrderedDict
# state dicts, bytes in protocol 2) and torch's own serialization of tensors, the same kinds of
# names torch's weights-only loader accepts. Anything else is a pickled object, a class from torch
# included (a whole nn.Module, an optimizer class, torch.hub.load): `torch.` alone proves nothing.
_PLAIN_GLOBALS = {"collections.OrderedDict", "collections.Counter", "_codecs.encode", "builtins.set",
                  "builtins.frozenset", "builtins.bytearray", "builtins.slice", "builtins.complex", "builtins.int",
                  "builtins.float", "builtins.bool", "builtins.str", "builtins.bytes", "builtins.tuple",
                  "builtins.list", "builtins.dict",
                  "torch.Size", "torch.device", "torch.Tensor", "torch.nn.parameter.Parameter",
                  "torch.serialization._get_layout", "torch._tensor._rebuild_from_type_v2"}
_TORCH_REBUILDERS = "torch._utils._rebuild_"  # _rebuild_tensor_v2, _rebuild_parameter, ... (tensors only)
_TENSOR_AND_STORAGE_TYPES = re.compile(r"torch(\.cuda|\.storage)?\.[A-Z][A-Za-z0-9]*(Tensor|Storage)")  # FloatStorage, ...
_MAX_PICKLES = 5  # the legacy (non-zip) torch.save format is a few pickles in a row


class PickleScan(NamedTuple):
    """What a file's pickles hold, read without unpickling them."""

    globals: list[str]  # module.name of each GLOBAL / STACK_GLOBAL, in file order
    parsed: bool  # every pickle read (each .pkl of a zip; at least the first of a legacy file) parsed to its end
    protocol: int  # the highest pickle protocol among them (torch.save writes 2 unless told otherwise)


def _scan(data: bytes) -> PickleScan:
    """The pickles of `data`, one after another. Parsing stops at the first bytes that are not a
    pickle: the legacy (non-zip) torch.save format follows its few pickles with raw storage bytes."""
    found: list[str] = []
    stream = io.BytesIO(data)
    complete = protocol = 0
    while complete < _MAX_PICKLES and stream.tell() < len(data):
        memo: dict[int, object] = {}
        recent: list[object] = []  # the last values pushed: STACK_GLOBAL takes its two strings from there
        try:
            for op, arg, _ in pickletools.genops(stream):
                if op.name == "PROTO":
                    protocol = max(protocol, int(arg))
                elif op.name == "GLOBAL":
                    found.append(".".join(str(arg).split(" ", 1)))
                elif op.name == "STACK_GLOBAL" and len(recent) >= 2:
                    found.append(f"{recent[-2]}.{recent[-1]}")
                if op.name == "MEMOIZE":
                    memo[len(memo)] = recent[-1] if recent else None
                elif op.name in ("PUT", "BINPUT", "LONG_BINPUT"):
                    memo[int(arg)] = recent[-1] if recent else None
                elif op.name in ("GET", "BINGET", "LONG_BINGET"):
                    recent.append(memo.get(int(arg)))
                elif op.name not in ("FRAME", "PROTO"):
                    recent.append(arg if isinstance(arg, str) else None)
                del recent[:-4]
        except Exception:  # noqa: BLE001 - pickletools raises ValueError, EOFError, ... on other bytes
            break
        complete += 1
    return PickleScan(found, complete > 0, protocol)


def is_torchscript_archive(path: str | Path) -> bool:
    """Whether `path` is a TorchScript zip (torch.jit.save, tools/export.py): it holds the model's
    code (`code/`, `constants.pkl`) besides its weights."""
    try:
        if not zipfile.is_zipfile(path):
            return False
        with zipfile.ZipFile(path) as archive:
            return any(name.endswith("/constants.pkl") or "/code/" in name for name in archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def scan_pickles(path: str | Path) -> PickleScan:
    """The globals and protocol of the pickles in `path` (a torch zip archive's .pkl files, or a
    legacy / plain pickle file); `parsed` false when they are not pickles at all."""
    path = Path(path)
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                scans = [_scan(archive.read(name)) for name in archive.namelist() if name.endswith(".pkl")]
            return PickleScan([g for scan in scans for g in scan.globals],
                              bool(scans) and all(scan.parsed for scan in scans),
                              max((scan.protocol for scan in scans), default=0))
        data = path.read_bytes()
    except (OSError, zipfile.BadZipFile, EOFError, ValueError, RuntimeError):
        return PickleScan([], False, 0)
    return _scan(data)


def _is_plain(name: str) -> bool:
    """Whether the global `module.name` is one that tensors and plain containers are pickled with."""
    module, _, attribute = name.rpartition(".")
    if module == "__builtin__":  # protocol 2 spells builtins the Python 2 way
        name = f"builtins.{attribute}"
    if name in _PLAIN_GLOBALS or name.startswith(_TORCH_REBUILDERS) or _TENSOR_AND_STORAGE_TYPES.fullmatch(name):
        return True
    # dtypes and quantization schemes are pickled as torch.float32, torch.per_tensor_affine, ...
    return module == "torch" and isinstance(getattr(torch, attribute, None), (torch.dtype, torch.qscheme))


def unsafe_globals(scan: PickleScan) -> list[str]:
    """The globals of a scan that are neither tensors nor plain containers (empty: none found, or
    the file is not a readable pickle)."""
    if not scan.parsed:
        return []
    unsafe = [g for g in scan.globals if not _is_plain(g)]
    return list(dict.fromkeys(unsafe))  # first occurrence order, no repeats
