"""Training under Slurm's `srun` without torchrun: the process group from Slurm's variables.

srun starts one process per task and tells each its place:

    SLURM_PROCID     the global rank            -> RANK
    SLURM_LOCALID    the rank on its node       -> LOCAL_RANK (the GPU it uses)
    SLURM_NTASKS     the number of processes    -> WORLD_SIZE (SLURM_STEP_NUM_TASKS first: srun's own count)
    SLURM_JOB_NODELIST  the nodes, compressed (`gpu[01-02,07]`); the first is the master
                     -> MASTER_ADDR (SLURM_STEP_NODELIST first, if srun set it; MASTER_ADDR if set)
    SLURM_JOB_ID     -> MASTER_PORT = 15000 + job id % 20000 (unless MASTER_PORT is set), so
                     two jobs sharing a node do not pick the same port

`slurm_to_torch_environment` writes those torch variables into the environment (only when
srun started several tasks and torchrun did not start this process), and torch's env://
rendezvous does the rest. A broken or hand-made Slurm environment is refused in one line
naming the variable: a count or rank that is not a number, SLURM_PROCID >= SLURM_NTASKS (that
process would wait for a group that can never fill), SLURM_LOCALID beyond the tasks per node.
`scontrol` may be missing on compute nodes, so the node list is
expanded here (`expand_hostlist`).
"""

from __future__ import annotations

import os
import re

from framework.errors import ConfigError


def expand_hostlist(text: str) -> list[str]:
    """Slurm's compressed host list -> host names, in order: `node[01-03,07],gpu-a[1-2]-ib`
    -> node01 node02 node03 node07 gpu-a1-ib gpu-a2-ib. Zero padding follows the range's
    first number; several bracket groups in one name multiply (`r[1-2]n[1-2]`)."""
    hosts = [host for expression in _split_outside_brackets(text) for host in _expand(expression, text)]
    if not hosts:
        raise ConfigError(f"Slurm node list '{text}' names no host")
    return hosts


def _split_outside_brackets(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [p.strip() for p in [*parts, current] if p.strip()]


def _expand(expression: str, whole: str) -> list[str]:
    match = re.search(r"\[([^\[\]]*)\]", expression)
    if match is None:
        if "[" in expression or "]" in expression:
            raise ConfigError(f"Slurm node list '{whole}': unbalanced brackets in '{expression}'")
        return [expression]
    prefix, rest = expression[:match.start()], expression[match.end():]
    if "[" in prefix or "]" in prefix:
        raise ConfigError(f"Slurm node list '{whole}': unbalanced brackets in '{expression}'")
    numbers = []
    for item in match.group(1).split(","):
        low, _, high = item.strip().partition("-")
        if not low.isdigit() or (high and not high.isdigit()) or (high and int(high) < int(low)):
            raise ConfigError(f"Slurm node list '{whole}': '{item}' is not a number or a range like 01-04")
        numbers += [f"{i:0{len(low)}d}" for i in range(int(low), int(high or low) + 1)]
    return [prefix + number + tail for number in numbers for tail in _expand(rest, whole)]


def launched_by_srun(env=os.environ) -> bool:
    """srun started this process as one of several tasks, and torchrun is not in between."""
    if "TORCHELASTIC_RUN_ID" in env or "RANK" in env:  # torchrun (or a user) set the ranks
        return False
    if "SLURM_PROCID" not in env or "SLURM_LOCALID" not in env or _tasks_variable(env) is None:
        return False
    return _slurm_number(env, _tasks_variable(env), low=1) > 1


# Where slurm_to_torch_environment takes each torch variable from (for error messages).
SLURM_SOURCES = {"RANK": "SLURM_PROCID", "LOCAL_RANK": "SLURM_LOCALID", "WORLD_SIZE": "SLURM_NTASKS or SLURM_STEP_NUM_TASKS",
                 "MASTER_ADDR": "the first host of SLURM_JOB_NODELIST", "MASTER_PORT": "SLURM_JOB_ID",
                 "LOCAL_WORLD_SIZE": "SLURM_TASKS_PER_NODE"}


def _tasks_variable(env) -> str | None:
    return next((name for name in ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS") if env.get(name) is not None), None)


def _slurm_number(env, name: str, low: int = 0, high: int | None = None) -> int:
    """A Slurm variable that must be an integer in [low, high], or one line naming it."""
    value = env[name].strip()
    if not value.isdigit():
        raise ConfigError(f"Slurm: {name} is {env[name]!r}, not a number (a broken or hand-made Slurm environment?)")
    if int(value) < low or (high is not None and int(value) > high):
        raise ConfigError(f"Slurm: {name} is {value}: expected {low}..{high}" if high is not None
                          else f"Slurm: {name} is {value}: expected >= {low}")
    return int(value)


def slurm_to_torch_environment(env=os.environ) -> dict[str, str]:
    """Set RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT in `env`
    from Slurm's variables when `launched_by_srun`; returns what was set (empty otherwise)."""
    if not launched_by_srun(env):
        return {}
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not env.get("MASTER_ADDR") and not nodelist:
        raise ConfigError("Slurm: SLURM_JOB_NODELIST is not set; set MASTER_ADDR to the first node's address")
    if not env.get("MASTER_PORT") and not env.get("SLURM_JOB_ID", "").isdigit():
        raise ConfigError("Slurm: SLURM_JOB_ID is not a number; set MASTER_PORT to a free port")
    tasks_per_node = (env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE") or "").split("(")[0]
    tasks = _tasks_variable(env)
    world_size = _slurm_number(env, tasks, low=1)
    # A rank outside 0..tasks-1 would wait for a group that can never fill (the whole dist.timeout).
    if _slurm_number(env, "SLURM_PROCID") >= world_size:
        raise ConfigError(f"Slurm: SLURM_PROCID is {env['SLURM_PROCID']} but {tasks} is {world_size}: "
                          f"ranks are 0..{world_size - 1}")
    local_limit = int(tasks_per_node) - 1 if tasks_per_node.isdigit() else world_size - 1
    _slurm_number(env, "SLURM_LOCALID", high=local_limit)
    values = {
        "RANK": env["SLURM_PROCID"].strip(),
        "LOCAL_RANK": env["SLURM_LOCALID"].strip(),
        "WORLD_SIZE": str(world_size),
        "MASTER_ADDR": env.get("MASTER_ADDR") or expand_hostlist(nodelist)[0],
        "MASTER_PORT": env.get("MASTER_PORT") or str(15000 + int(env["SLURM_JOB_ID"]) % 20000),
    }
    if tasks_per_node.isdigit():
        values["LOCAL_WORLD_SIZE"] = tasks_per_node
    env.update(values)
    return values
