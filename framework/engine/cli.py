"""What the command-line tools share: one-line errors and the common arguments."""

from __future__ import annotations

import argparse
import sys
from typing import Callable

from framework.errors import UserError


def user_error_line(err: BaseException) -> str:
    """The one line to show for a user error, also when it was raised in a DataLoader worker
    (torch re-raises those with the worker's traceback folded into the message)."""
    text = str(err).strip()
    if "Original Traceback" in text:
        last = text.splitlines()[-1]
        text = last.split(": ", 1)[1] if ": " in last else last
    return text


def run(main: Callable[[argparse.Namespace], int | None], parser: argparse.ArgumentParser,
        argv: list[str] | None = None) -> int:
    """Parse args and run `main`; a UserError becomes `error: <one line>` (one per mistake when
    it lists several, as a config check does) and exit status 2."""
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
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
