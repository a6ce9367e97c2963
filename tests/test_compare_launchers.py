"""tools/compare.py's launcher options refused in one line before anything runs or is written:
--launcher slurm without sbatch, an unknown --slurm option, --slurm without --launcher slurm,
--report of a folder that holds no comparison."""

import pytest

from support import REPO, call_tool

QUICKSTART = REPO / "configs/segmentation/unet_shapes.yaml"


def compare(tmp_path, *args):
    return call_tool("compare", "--configs", QUICKSTART, "--seeds", "0", "--work-dir", tmp_path / "out", *args)


def test_slurm_without_sbatch_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch in it
    result = compare(tmp_path, "--launcher", "slurm")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: --launcher slurm: sbatch is not on PATH (no Slurm client on this machine); "
        "run from a Slurm login node, or use --launcher local or worker"]
    assert not (tmp_path / "out").exists()


def test_an_unknown_slurm_option_is_named_with_the_close_one(tmp_path, monkeypatch):
    pytest.importorskip("submitit")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin/sbatch").write_text("#!/bin/sh\nexit 1\n")  # never called: the option is refused first
    (tmp_path / "bin/sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    result = compare(tmp_path, "--launcher", "slurm", "--slurm", "partiton=gpu")
    assert result.returncode == 2
    assert "--slurm: unknown option 'partiton'; did you mean 'partition'?" in result.stderr
    assert not (tmp_path / "out").exists()


def test_slurm_options_without_the_slurm_launcher_are_refused(tmp_path):
    result = compare(tmp_path, "--slurm", "partition=gpu")
    assert result.returncode == 2
    assert "--slurm options are for --launcher slurm, not local" in result.stderr


def test_a_report_of_a_folder_without_a_comparison_is_refused(tmp_path):
    result = call_tool("compare", "--report", "--work-dir", tmp_path)
    assert result.returncode == 2
    assert f"{tmp_path / 'compare.json'} not found" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_slurm_options_from_a_launcher_block_and_the_command_line(tmp_path):
    pytest.importorskip("submitit")
    from framework.comparison.slurm_launcher import parse_options

    block = tmp_path / "launcher.yaml"
    block.write_text("launcher:\n  partition: gpu\n  timeout_min: 240\n  signal_delay_s: 300\n")
    options = parse_options(["timeout_min=30", str(block), "slurm_qos=high", "gpus_per_node=2"])
    assert options == {"timeout_min": 30, "cpus_per_task": 1, "gpus_per_node": 2, "slurm_partition": "gpu",
                       "slurm_qos": "high",
                       "slurm_additional_parameters": {"signal": "USR1@300", "requeue": True}}


def test_a_slurm_options_file_without_a_launcher_block_is_refused(tmp_path):
    pytest.importorskip("submitit")
    from framework.comparison.slurm_launcher import parse_options
    from framework.errors import ConfigError

    block = tmp_path / "launcher.yaml"
    block.write_text("partition: gpu\n")
    with pytest.raises(ConfigError, match="no `launcher:` block"):
        parse_options([str(block)])


@pytest.mark.parametrize("launcher, words", [("worker", "start more workers"), ("slurm", "array_parallelism")])
def test_jobs_with_another_launcher_is_refused(tmp_path, launcher, words):
    result = compare(tmp_path, "--launcher", launcher, "--jobs", "2")
    assert result.returncode == 2
    assert f"--jobs is for --launcher local; with {launcher}" in result.stderr and words in result.stderr
    assert not (tmp_path / "out").exists()
