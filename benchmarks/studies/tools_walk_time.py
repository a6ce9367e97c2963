"""How long tests/test_tools_walk.py takes, in all and per shipped config and per tool: the walk
must stay well under 2 minutes on 2 cores. A measurement, not a test; run it on a quiet machine
(on a loaded one every figure grows with the load).

    python benchmarks/studies/tools_walk_time.py            # one pytest process (-n 0), ~1.5-4 min

Prints the wall time of the pytest run, then the summed call times per config and per tool,
largest last, so the configs to shrink (or not) can be picked from measurements.
"""

import argparse
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DURATION = re.compile(r"^([\d.]+)s call\s+\S+\[(.+)-(\w+)\]$")


def main() -> int:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "--durations=0",
                           "--durations-min=0", "tests/test_tools_walk.py"], cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - start
    by_config: dict[str, float] = defaultdict(float)
    by_tool: dict[str, float] = defaultdict(float)
    for line in done.stdout.splitlines():
        match = DURATION.match(line.strip())
        if match:
            seconds, config, tool = float(match[1]), match[2], match[3]
            by_config[config] += seconds
            by_tool[tool] += seconds
    for title, totals in (("per config", by_config), ("per tool", by_tool)):
        print(f"{title}:")
        for name, seconds in sorted(totals.items(), key=lambda item: item[1]):
            print(f"  {seconds:7.1f} s  {name}")
    print(f"pytest exit status {done.returncode}, wall {wall:.1f} s, summed calls {sum(by_tool.values()):.1f} s")
    if done.returncode != 0:
        print(done.stdout[-3000:], file=sys.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
