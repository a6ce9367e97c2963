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


def _globals_of(data: bytes) -> tuple[list[str], bool]:
    """(module.name of each GLOBAL / STACK_GLOBAL, whether at least one pickle parsed to its end).

    Parsing stops at the first bytes that are not a pickle: the legacy (non-zip) torch.save
    format follows its few pickles with raw storage bytes."""
    found: list[str] = []
    stream = io.BytesIO(data)
    complete = 0
    while complete < _MAX_PICKLES and stream.tell() < len(data):
        memo: dict[int, object] = {}
        recent: list[object] = []  # the last values pushed: STACK_GLOBAL takes its two strings from there
        try:
            for op, arg, _ in pickletools.genops(stream):
                if op.name == "GLOBAL":
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
    return found, complete > 0


def pickled_globals(path: str | Path) -> tuple[list[str], bool]:
    """(globals the file's pickles import, whether it parsed as pickles at all)."""
    path = Path(path)
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                names = [n for n in archive.namelist() if n.endswith(".pkl")]
                found: list[str] = []
                for name in names:
                    globals_, ok = _globals_of(archive.read(name))
                    if not ok:
                        return found, False
                    found += globals_
                return found, bool(names)
        data = path.read_bytes()
    except (OSError, zipfile.BadZipFile, EOFError, ValueError, RuntimeError):
        return [], False
    return _globals_of(data)


def _is_plain(name: str) -> bool:
    """Whether the global `module.name` is one that tensors and plain containers are pickled with."""
    module, _, attribute = name.rpartition(".")
    if module == "__builtin__":  # protocol 2 spells builtins the Python 2 way
        name = f"builtins.{attribute}"
    if name in _PLAIN_GLOBALS or name.startswith(_TORCH_REBUILDERS) or _TENSOR_AND_STORAGE_TYPES.fullmatch(name):
        return True
    # dtypes and quantization schemes are pickled as torch.float32, torch.per_tensor_affine, ...
    return module == "torch" and isinstance(getattr(torch, attribute, None), (torch.dtype, torch.qscheme))


def unsafe_globals(path: str | Path) -> list[str]:
    """The globals of `path` that are neither tensors nor plain containers (empty: none found,
    or the file is not a readable pickle)."""
    found, parsed = pickled_globals(path)
    if not parsed:
        return []
    unsafe = [g for g in found if not _is_plain(g)]
    return list(dict.fromkeys(unsafe))  # first occurrence order, no repeats
