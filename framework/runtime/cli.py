"""What the command-line tools share: one-line errors, exit statuses and logging."""

from __future__ import annotations

import argparse
import errno
import gc
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from framework.errors import ConfigError, UserError

logger = logging.getLogger("framework")

# The largest option values a tool takes, where a larger one only exhausts memory or time (a
# `--num 10**30` listed its grid files before reading a sample and held 18 GB, issue 63); the
# checks name them (`--size: expected an integer >= 1 and <= 16384, got ...`).
MAX_SIDE = 16384  # pixels of an image side: a 16384 x 16384 RGB float32 image is 3 GiB
MAX_BATCH = 4096  # images in one forward pass (or one grid)
MAX_IMAGES = 1_000_000  # images one call reads or generates (FID's reference sets hold 50 000)
MAX_DRAWS = 1000  # noise draws of one input (--samples), noisy copies of it (--smoothgrad)
MAX_SCALE = 8  # a test-time scale factor: a 2048-pixel side becomes MAX_SIDE
MAX_WORKERS = 256  # processes reading files
MAX_DEPTH = 100  # module nesting levels: no network nests deeper


def user_error_line(err: BaseException) -> str:
    """The one line to show for a user error, also when it was raised in a DataLoader worker
    (torch re-raises those with the worker's traceback folded into the message)."""
    text = str(err).strip()
    if "Original Traceback" in text:
        last = text.splitlines()[-1]
        text = last.split(": ", 1)[1] if ": " in last else last
    return text


def check_options(checks: dict[str, tuple]) -> dict:
    """Refuse command-line values no run can use, with the config's rules and wording:
    {"--batch-size": (args.batch_size, integer(1))} -> `--batch-size: expected an integer >= 1, got 0`.
    None means not given; each item of a list (`--size H W`) is checked. Returns {option: the value
    as the rule keeps it} (an integral float becomes an int: the Python API's `num=3.0`)."""
    errors: list[str] = []
    kept = {}
    for option, (value, rule) in checks.items():
        if isinstance(value, (list, tuple)):
            kept[option] = type(value)(rule(item, option, errors) for item in value)
        else:
            kept[option] = None if value is None else rule(value, option, errors)
    if errors:
        raise ConfigError("\n".join(dict.fromkeys(errors)))
    return kept


def os_error_line(err: OSError) -> str:
    """'<path>: <cause>' for a file-system failure (no space left, permission denied, ...)."""
    where = err.filename if err.filename is not None else "a file"
    return f"{where}: {err.strerror or err}"


def pause_collector_for_startup() -> None:
    """First thing in a tool's `__main__`: no cyclic garbage collection while the imports made
    after it (train.py imports torch in main()) and the build create some 400k objects that live
    to the end (torch, torch._dynamo, albumentations, TensorBoard). Each full collection walks
    all of them, about 0.1 s each and 7 of them before a pix2pix run's first step.
    `startup_done()` turns collection back on."""
    gc.disable()


def startup_done() -> bool:
    """Collect once, move what start-up built out of the collector's sight (gc.freeze: modules,
    networks and datasets stay to the end, and forked DataLoader workers then share their pages
    untouched) and turn collection back on; True when it froze. Does nothing unless
    `pause_collector_for_startup()` ran: a test or a notebook calling a tool's main() or the API
    in-process keeps Python's defaults (and what it froze itself stays frozen)."""
    if gc.isenabled():
        return False
    gc.collect()
    gc.freeze()
    gc.enable()
    return True


def exit_process(status: int) -> NoReturn:
    """sys.exit(status) without the interpreter's last collection over every object it ever
    tracked (0.8 s after importing torch._dynamo): the tool has closed its files and freed its
    trainer by now; exit handlers and module teardown still run."""
    gc.freeze()
    sys.exit(status)


def run(main: Callable[[argparse.Namespace], int | None], parser: argparse.ArgumentParser,
        argv: list[str] | None = None, on_error: Callable[[str], None] | None = None) -> int:
    """Parse args and run `main`. A UserError becomes `error: <one line>` (one per mistake when it
    lists several, as a config check does) and exit status 2; a file-system error (disk full, an
    unwritable folder) `error: <path>: <cause>` and exit status 1. `on_error(text)` also gets
    what was printed (tools/train.py hands it to torchrun's error file)."""
    parser.add_argument("--debug", action="store_true", help="show full tracebacks")
    one_line_usage_errors(parser)
    try:
        args = parser.parse_intermixed_args(argv)  # key=value overrides before or after --options
    except OSError as err:  # an output path under a file, found while parsing (output_folder, output_file)
        return _fail(f"error: {os_error_line(err)}", 1, on_error)
    try:
        return main(args) or 0
    except UserError as err:
        if args.debug:
            raise
        return _fail("\n".join(f"error: {line}" for line in user_error_line(err).splitlines()), 2, on_error)
    except OSError as err:
        if args.debug or err.strerror is None:
            raise
        return _fail(f"error: {os_error_line(err)}", 1, on_error)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def one_line_usage_errors(parser: argparse.ArgumentParser) -> None:
    """argparse's own refusals (an unknown option, a missing value, `--num abc`, an unknown
    choice, a path option's type check below) as one `error:` line and exit status 2, like every
    other user error, instead of its usage block and `prog: error:` line."""
    def error(message: str) -> NoReturn:
        print(f"error: {message} (--help lists the options)", file=sys.stderr)
        sys.exit(2)

    parser.error = error


def _empty(text: str, what: str) -> None:
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected {what}, got an empty path")


def _refuse_path_under_a_file(text: str) -> None:
    """A path with a file among its parents cannot be written: the OSError writing would raise
    (`error: <path>: Not a directory`, exit status 1, as every tool says it), before any work."""
    if any(parent.exists() and not parent.is_dir() for parent in Path(text).expanduser().parents):
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), text)


def given_path(text: str) -> str:
    """argparse `type=` of an option naming a file or folder to read: an empty path is refused
    (it would read the current folder, and the error would name `.`)."""
    _empty(text, "a path")
    return text


def output_folder(text: str) -> str:
    """argparse `type=` of an option naming a folder to write into: an existing file or an empty
    path is refused while the arguments are parsed, before any work (a path under a file too, as
    the file-system error it would be); results would otherwise fail half-way, after the work."""
    _empty(text, "a folder")
    path = Path(text).expanduser()
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file, not a folder: name a folder to write into")
    _refuse_path_under_a_file(text)
    return text


def output_file(text: str) -> str:
    """argparse `type=` of an option naming a file to write: an existing folder or an empty path
    is refused while the arguments are parsed, before any work (a path under a file too, as the
    file-system error it would be)."""
    _empty(text, "a file name")
    path = Path(text).expanduser()
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder, not a file: name the file to write")
    _refuse_path_under_a_file(text)
    return text


def _fail(text: str, status: int, on_error: Callable[[str], None] | None) -> int:
    print(text, file=sys.stderr)
    if on_error is not None:
        on_error(text)
    return status


def write_torchelastic_error_file(text: str) -> None:
    """Put a failed rank's `error:` line in the file torchrun names in TORCHELASTIC_ERROR_FILE,
    in the JSON layout of torch.distributed.elastic's @record, so that torchrun's failure
    summary shows the line (a handled error never reaches @record, and the file stays empty)."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    data = {"message": {"message": text, "extraInfo": {"py_callstack": text, "timestamp": str(int(time.time()))}}}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f)


def setup_logging(work_dir: str | None = None, filename: str = "train.log", main_process: bool = True) -> None:
    """Console (and `<work_dir>/<filename>`) logging on the main process; warnings only elsewhere."""
    logger.handlers.clear()
    logger.propagate = False
    logger.setLevel(logging.INFO if main_process else logging.WARNING)
    fmt = logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S")
    console = logging.StreamHandler(sys.stdout)
    console.setFormatter(fmt)
    logger.addHandler(console)
    if work_dir and main_process:
        Path(work_dir).mkdir(parents=True, exist_ok=True)
        file = logging.FileHandler(Path(work_dir) / filename, encoding="utf-8")
        file.setFormatter(fmt)
        logger.addHandler(file)


def log_file_only(message: str) -> None:
    """Log `message` to the log files only (it was shown on the console before they were opened)."""
    record = logger.makeRecord(logger.name, logging.INFO, __file__, 0, message, None, None)
    for handler in logger.handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)
