"""Every option of every tool (tools/*.py and benchmarks/gpu/gpu_check.py) tried with bad values: the
wrong type, negative, zero, huge, not a number, a file where a folder is wanted and the reverse, a
missing path, an unknown choice. Each must end in one `error:` line on stderr naming the option or
the value, a non-zero exit, no traceback, and nothing written (issue 63, item 6).

`OPTIONS` is the table: per tool, the arguments a good call needs (`base`) and, per option, the
kind of value it takes; `BAD` gives each kind's bad values. `test_the_table_covers_every_option`
reads each tool's argparse parser and fails on an option the table does not list, so a new option
joins the table (and is tried) before it ships.

The cases run in this process (`call_tool`: the tool's own parsing and main), a tool's whole list
in one test, in a working directory of their own whose every file is compared before and after.
"""

import importlib.util
import sys
from dataclasses import dataclass, field

import numpy as np
import pytest
from PIL import Image

from support import REPO, TINY_UNET, call_tool, captured

sys.path.insert(0, str(REPO))
from benchmarks.gpu import gpu_check  # noqa: E402

HUGE = str(10**30)  # above every bound, and beyond a 64-bit integer

# kind -> [(case, the words after the option)]; {names} are files made by `workspace`
BAD = {
    "config": [("missing", ["{tmp}/nope.yaml"]), ("folder", ["{tmp}/folder"]), ("png", ["{tmp}/image.png"]),
               ("text-not-a-mapping", ["{tmp}/notes.txt"]), ("empty", [""])],
    "checkpoint": [("missing", ["{tmp}/nope.pth"]), ("folder", ["{tmp}/folder"]), ("png", ["{tmp}/image.png"]),
                   ("empty", [""])],
    "output_file": [("a-folder", ["{tmp}/folder"]), ("under-a-file", ["{tmp}/notes.txt/x.out"]), ("empty", [""])],
    "output_folder": [("a-file", ["{tmp}/notes.txt"]), ("under-a-file", ["{tmp}/notes.txt/sub"]), ("empty", [""])],
    "inputs": [("missing", ["{tmp}/nope.png"]), ("empty-folder", ["{tmp}/empty"]), ("not-an-image", ["{tmp}/notes.txt"]),
               ("a-checkpoint", ["{run}/checkpoints/iter_1.pth"])],
    "count": [("text", ["abc"]), ("fraction", ["1.5"]), ("zero", ["0"]), ("negative", ["-1"]), ("huge", [HUGE])],
    "count0": [("text", ["abc"]), ("fraction", ["1.5"]), ("negative", ["-1"]), ("huge", [HUGE])],
    "seed": [("text", ["abc"]), ("negative", ["-1"]), ("huge", [HUGE])],
    "seeds": [("text", ["abc"]), ("negative", ["-1"]), ("huge", [HUGE])],
    "sides": [("text", ["abc", "8"]), ("zero", ["0", "8"]), ("negative", ["8", "-1"]), ("huge", [HUGE, HUGE]),
              ("one-side", ["8"])],
    "positive": [("text", ["abc"]), ("nan", ["nan"]), ("zero", ["0"]), ("negative", ["-1"]), ("huge", ["1e400"])],
    "tolerance": [("text", ["abc"]), ("nan", ["nan"]), ("negative", ["-1"]), ("huge", ["1e400"])],
    "choice": [("unknown", ["nope"])],
    "flag": [("with-a-value", None)],  # --flag=yes
    "space": [("missing", ["{tmp}/nope.yaml"]), ("folder", ["{tmp}/folder"]), ("text-not-a-mapping", ["{tmp}/notes.txt"]),
              ("empty", [""])],
    "slurm_option": [("no-equals", ["partition"]), ("unknown-key", ["nosuch=1"]), ("missing-file", ["{tmp}/nope.yaml"])],
    "overrides": [("no-equals", ["notakeyvalue"]), ("unknown-key", ["no.such.key=1"]),
                  ("bad-value", ["train.max_iters=abc"])],
}


@dataclass
class Tool:
    base: list  # a good call, {names} filled in; the option tried replaces its own words here
    options: dict  # option (or positional's dest) -> kind in BAD
    skip: dict = field(default_factory=dict)  # (option, case) -> why it is no mistake for this option


CHECKPOINT = "{run}/checkpoints/iter_1.pth"
CONFIG = "{run}/config.yaml"  # the trained run's resolved config: the checkpoint fits it

OPTIONS = {
    "train": Tool(["--config", CONFIG, "--work-dir", "{tmp}/out", "train.max_iters=1"],
                  {"--config": "config", "--work-dir": "output_folder", "--resume": "checkpoint",
                   "--overwrite": "flag", "--allow-new-world-size": "flag", "overrides": "overrides"}),
    "test": Tool(["--config", CONFIG, "--checkpoint", CHECKPOINT, "--work-dir", "{tmp}/out"],
                 {"--config": "config", "--checkpoint": "checkpoint", "--work-dir": "output_folder",
                  "--show-dir": "output_folder", "overrides": "overrides"}),
    "infer": Tool(["--config", CONFIG, "--checkpoint", CHECKPOINT, "--output", "{tmp}/out", "--input",
                   "{tmp}/image.png"],
                  {"--config": "config", "--checkpoint": "checkpoint", "--input": "inputs", "--output": "output_folder",
                   "--mode": "choice", "--crop": "sides", "--stride": "sides", "--tile-batch": "count", "--flip": "flag",
                   "--scales": "positive", "--batch-size": "count", "--device": "choice", "--amp": "flag",
                   "--num": "count", "--samples": "count", "--seed": "seed", "--direction": "choice",
                   "--saliency": "choice", "--smoothgrad": "count", "--progress": "choice", "overrides": "overrides"}),
    "export": Tool(["--config", CONFIG, "--checkpoint", CHECKPOINT, "--format", "torchscript", "--output",
                    "{tmp}/out.pt"],
                   {"--config": "config", "--checkpoint": "checkpoint", "--format": "choice",
                    "--output": "output_file", "--dynamic": "flag", "--size": "sides", "--batch": "count",
                    "--atol": "tolerance", "--direction": "choice", "overrides": "overrides"}),
    "analyze_model": Tool(["--config", CONFIG, "--checkpoint", CHECKPOINT, "--size", "32", "32"],
                          {"--config": "config", "--checkpoint": "checkpoint", "--size": "sides", "--depth": "count0",
                           "--json": "output_file", "overrides": "overrides"}),
    "browse_dataset": Tool(["--config", CONFIG, "--output", "{tmp}/out", "--num", "2"],
                           {"--config": "config", "--output": "output_folder", "--split": "choice", "--num": "count",
                            "--rows": "count", "overrides": "overrides"}),
    "check_dataset": Tool(["--config", CONFIG],
                          {"--config": "config", "--split": "choice", "--workers": "count0", "--json": "output_file",
                           "--convert-rgb-masks": "output_folder", "overrides": "overrides"}),
    "print_config": Tool(["--config", CONFIG],
                         {"--config": "config", "--output": "output_file", "overrides": "overrides"}),
    "compare": Tool(["--configs", CONFIG, "--seeds", "0", "--work-dir", "{tmp}/out", "train.max_iters=1",
                     "train.val_interval=1"],
                    {"--configs": "config", "--seeds": "seeds", "--metric": "choice", "--jobs": "count",
                     "--work-dir": "output_folder", "--launcher": "choice", "--slurm": "slurm_option",
                     "--stale-minutes": "positive", "--report": "flag", "overrides": "overrides"}),
    "search": Tool(["--config", CONFIG, "--space", "{tmp}/space.yaml", "--trials", "1", "--work-dir", "{tmp}/out"],
                   {"--config": "config", "--space": "space", "--trials": "count", "--seed": "seed",
                    "--pruner": "choice", "--startup-trials": "count0", "--work-dir": "output_folder",
                    "overrides": "overrides"}),
    "make_fixture_dataset": Tool(["--layout", "facades", "{tmp}/out", "--samples", "1"],
                                 {"--layout": "choice", "out": "output_folder", "--samples": "count", "--seed": "seed",
                                  "--train-ids": "flag"}),
    "gpu_check": Tool(["{tmp}/out", "--steps", "speed"],
                      {"out": "output_folder", "--dry-run": "flag", "--steps": "choice"}),
}
COMMON = {"--debug": "flag"}  # every tool's, from framework.runtime.cli.run
OVERRIDES_NOT_A_CONFIG = ("make_fixture_dataset", "gpu_check")


def parser_of(tool: str):
    if tool == "gpu_check":
        return gpu_check.parse_args()
    spec = importlib.util.spec_from_file_location(f"tools_{tool}", REPO / "tools" / f"{tool}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.parse_args()


def options_of(parser) -> set[str]:
    """Each argument's name as the table writes it: the long option, or a positional's dest."""
    names = set()
    for action in parser._actions:
        if action.dest == "help":
            continue
        long = [o for o in action.option_strings if o.startswith("--")]
        names.add(long[0] if long else action.dest)
    return names


def test_the_table_has_every_tool():
    """A new script in tools/ joins the table (its options are then checked by the test below)."""
    assert sorted(path.stem for path in (REPO / "tools").glob("*.py")) == sorted(set(OPTIONS) - {"gpu_check"})


@pytest.mark.parametrize("tool", sorted(OPTIONS))
def test_the_table_covers_every_option(tool):
    parser = parser_of(tool)
    missing = options_of(parser) - set(OPTIONS[tool].options)
    assert not missing, f"{tool}: options not in OPTIONS (add them, with the kind of value they take): {missing}"
    stale = set(OPTIONS[tool].options) - options_of(parser) - set(COMMON)
    assert not stale, f"{tool}: OPTIONS lists options the tool does not have: {stale}"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A trained tiny run and the files the bad values name."""
    root = tmp_path_factory.mktemp("tool_options")
    run = root / "run"
    result = call_tool("train", "--config", REPO / "configs/segmentation/unet_shapes.yaml", "--work-dir", run,
                       *TINY_UNET, "data.train.num_workers=0", "train.max_iters=1", "train.val_interval=0")
    assert result.returncode == 0, result.stderr
    (root / "folder").mkdir()
    (root / "folder" / "kept.txt").write_text("the user's\n")
    (root / "empty").mkdir()
    (root / "notes.txt").write_text("not an image, not a config\n")
    (root / "space.yaml").write_text("optim.lr: {log_uniform: [1.0e-4, 1.0e-2]}\n")
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(root / "image.png")
    return root


def cases(tool: str):
    """(case id, option, the bad words, argv) for every option of `tool` and every bad value of its kind."""
    spec = OPTIONS[tool]
    for option, kind in {**spec.options, **COMMON}.items():
        if kind == "overrides" and tool in OVERRIDES_NOT_A_CONFIG:
            continue
        for case, words in BAD[kind]:
            if (option, case) in spec.skip:
                continue
            yield f"{option} {case}", option, words or [], argv_with(spec.base, option, words)


def argv_with(base: list, option: str, words: list | None) -> list:
    """`base` with `option`'s words replaced by `words` (`None`: the flag given a value)."""
    argv = list(base)
    if not option.startswith("-"):  # a positional: the overrides go last, `out` replaces its placeholder
        if option == "overrides":
            return argv + words
        at = argv.index("{tmp}/out")
        return argv[:at] + words + argv[at + 1:]
    if option in argv:  # drop the option and its words (up to the next option or override)
        at = argv.index(option)
        end = at + 1
        while end < len(argv) and not argv[end].startswith("-") and "=" not in argv[end]:
            end += 1
        argv = argv[:at] + argv[end:]
    return argv + ([f"{option}=yes"] if words is None else [option, *words])


def files_under(root) -> dict:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


def run_case(tool: str, argv: list):
    if tool == "gpu_check":
        return captured(gpu_check.main, argv)
    return call_tool(tool, *argv)


@pytest.mark.parametrize("tool", sorted(OPTIONS))
def test_every_bad_option_value_is_one_line_and_writes_nothing(tool, workspace, monkeypatch):
    monkeypatch.chdir(workspace)  # default outputs (work_dirs/...) land here, and are seen
    names = {"tmp": workspace, "run": workspace / "run"}
    failures = []
    for case, option, words, argv in cases(tool):
        words, argv = [word.format(**names) for word in words], [word.format(**names) for word in argv]
        before = files_under(workspace)
        result = run_case(tool, argv)
        lines = result.stderr.strip().splitlines()
        named = option in result.stderr or any(word and word.split("=")[0] in result.stderr for word in words)
        problems = [what for what, wrong in [
            (f"exit status {result.returncode}", result.returncode == 0),
            ("a traceback", "Traceback" in result.stderr + result.stdout),
            (f"{len(lines)} lines on stderr", len(lines) != 1 or not lines[0].startswith("error: ")),
            ("neither the option nor the value named", not named),
            ("files written", files_under(workspace) != before)] if wrong]
        if problems:
            failures.append(f"{tool} {case} ({' '.join(argv)}): {', '.join(problems)}\n    "
                            + "\n    ".join(lines[-3:] or result.stdout.splitlines()[-2:]))
    assert not failures, f"{len(failures)} bad values not refused in one line:\n" + "\n".join(failures)
