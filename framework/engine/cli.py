"""What the command-line tools share: one-line errors, exit statuses and logging."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from pathlib import Path

from framework.errors import ConfigError, UserError

logger = logging.getLogger("framework")


def user_error_line(err: BaseException) -> str:
    """The one line to show for a user error, also when it was raised in a DataLoader worker
    (torch re-raises those with the worker's traceback folded into the message)."""
    text = str(err).strip()
    if "Original Traceback" in text:
        last = text.splitlines()[-1]
        text = last.split(": ", 1)[1] if ": " in last else last
    return text


def check_options(checks: dict[str, tuple]) -> None:
    """Refuse command-line values no run can use, with the config's rules and wording:
    {"--batch-size": (args.batch_size, integer(1))} -> `--batch-size: expected an integer >= 1, got 0`.
    None means not given; each item of a list (`--size H W`) is checked."""
    errors: list[str] = []
    for option, (value, rule) in checks.items():
        for item in value if isinstance(value, (list, tuple)) else [] if value is None else [value]:
            rule(item, option, errors)
    if errors:
        raise ConfigError("\n".join(dict.fromkeys(errors)))


def os_error_line(err: OSError) -> str:
    """'<path>: <cause>' for a file-system failure (no space left, permission denied, ...)."""
    where = err.filename if err.filename is not None else "a file"
    return f"{where}: {err.strerror or err}"


def run(main: Callable[[argparse.Namespace], int | None], parser: argparse.ArgumentParser,
        argv: list[str] | None = None) -> int:
    """Parse args and run `main`. A UserError becomes `error: <one line>` (one per mistake when it
    lists several, as a config check does) and exit status 2; a file-system error (disk full, an
    unwritable folder) `error: <path>: <cause>` and exit status 1."""
    parser.add_argument("--debug", action="store_true", help="show full tracebacks")
    args = parser.parse_intermixed_args(argv)  # key=value overrides before or after --options
    try:
        return main(args) or 0
    except UserError as err:
        if args.debug:
            raise
        for line in user_error_line(err).splitlines():
            print(f"error: {line}", file=sys.stderr)
        return 2
    except OSError as err:
        if args.debug or err.strerror is None:
            raise
        print(f"error: {os_error_line(err)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


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
