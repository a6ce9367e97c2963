"""One weights file (`.pth`, `.pt`, `.safetensors`) read to the CPU without running code from it.

`torch.load(weights_only=True)` or safetensors; when torch refuses a file, its pickles are read
(framework.serialization.pickle_globals) to tell a file of pickled objects (refused as unsafe,
naming them: there is no fallback to unsafe loading) from one that is damaged or not a
checkpoint at all. Either way the error is one line naming the file.
"""

from __future__ import annotations

import os
import pickle
import warnings
from pathlib import Path

import torch

from framework.errors import CheckpointError
from framework.serialization.pickle_globals import is_torchscript_archive, scan_pickles, unsafe_globals


class UnsafeCheckpointError(CheckpointError):
    """The file holds pickled objects other than tensors and plain containers: it is refused."""


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _whole_sentences(text: str, limit: int = 200) -> str:
    """`text` cut to at most `limit` characters after its last whole sentence that fits (torch's
    first line about a damaged zip archive is 337 characters, its first sentence says it all),
    or cut with "..." where no sentence ends in time."""
    if len(text) <= limit:
        return text
    end = text.rfind(". ", 0, limit)
    return text[:end + 1] if end > 0 else text[:limit - 3] + "..."


def read_weights_file(path: str | os.PathLike) -> dict:
    """Everything in a `.pth`/`.pt`/`.safetensors` file, on the CPU, without running code from it."""
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"{path} is a directory, not a checkpoint file (a run's checkpoints are "
                              "<work_dir>/checkpoints/iter_<N>.pth; --resume alone takes the latest)")
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            state = load_file(str(path), device="cpu")
        except (SafetensorError, OSError, ValueError) as err:
            raise CheckpointError(f"cannot load {path}: {_first_line(err)}") from err
        return _refuse_non_finite(state, path)
    try:
        with warnings.catch_warnings():  # torch warns about the "pickle protocol" of random bytes
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - every failure becomes one clear message
        if is_torchscript_archive(path):
            raise UnsafeCheckpointError(
                f"refused to load {path}: it is a TorchScript archive (a model's code and weights, as "
                "torch.jit.save and tools/export.py write), not a checkpoint or state dict; give the .pth "
                "checkpoint it was exported from") from err
        scan = scan_pickles(path)  # the file's pickles read, not torch's message
        unsafe = unsafe_globals(scan)
        if unsafe:  # a real pickle of some class: the weights-only loader refused to import it
            named = ", ".join(unsafe[:3]) + (f" and {len(unsafe) - 3} more" if len(unsafe) > 3 else "")
            raise UnsafeCheckpointError(
                f"refused to load {path}: it holds pickled objects ({named}) besides tensors and "
                "plain containers, and unpickling them could run code; re-save it as a state dict of tensors"
            ) from err
        if scan.parsed and scan.protocol >= 4:  # torch's weights-only loader reads protocols 2 and 3 only
            raise CheckpointError(
                f"cannot load {path}: it was saved with pickle protocol {scan.protocol} (torch.save(..., "
                f"pickle_protocol={scan.protocol})), which torch's weights-only loader does not read; save it "
                "again with torch.save's default protocol") from err
        # Anything else (random bytes, a truncated archive, a text file) is not a readable checkpoint.
        detail = ("" if isinstance(err, pickle.UnpicklingError)
                  else f" ({type(err).__name__}: {_whole_sentences(_first_line(err))})")
        raise CheckpointError(f"cannot load {path}: not a PyTorch checkpoint, or a corrupt or truncated "
                              f"one{detail}") from err
    if not isinstance(state, dict):
        raise CheckpointError(f"{path} holds a {type(state).__name__}, expected a dict")
    return _refuse_non_finite(state, path)


def _refuse_non_finite(state: dict, path: Path) -> dict:
    """`state`, or a CheckpointError naming the file and the first tensor holding NaN or infinity: a
    NaN in a VGG weights file trained for an iteration and was then reported as a diverged run
    ("lower optim.lr"), far from its cause. One pass over the tensors, once per file read."""
    for key, tensor in _floating_tensors(state, ""):
        finite = torch.isfinite(tensor)
        if not bool(finite.all()):
            bad = tensor.numel() - int(finite.sum())
            raise CheckpointError(f"{path}: the weights are not finite (NaN or inf in {key}, {bad} of "
                                  f"{tensor.numel()} values): the file is damaged or the training that produced "
                                  "it diverged; use another copy")
    return state


def _floating_tensors(node, key: str):
    """(key path, tensor) of every floating-point tensor in nested dicts and lists."""
    if isinstance(node, torch.Tensor):
        if node.is_sparse:  # its stored values; other layouts (quantized, compressed) hold no NaN to check
            node = node.coalesce().values()
        if node.layout == torch.strided and not node.is_quantized and (node.is_floating_point() or node.is_complex()):
            yield key, node
    elif isinstance(node, dict):
        for name, value in node.items():
            yield from _floating_tensors(value, f"{key}.{name}" if key else str(name))
    elif isinstance(node, (list, tuple)):
        for index, value in enumerate(node):
            yield from _floating_tensors(value, f"{key}[{index}]")
