"""Mutation testing of one core module with mutmut 3.x, against the fast tests that cover it.

    pip install -e .[dev]                                   # mutmut is in the dev extra
    python tests/scripts/mutation.py optim.optimizers       # one module (see MODULES)
    python tests/scripts/mutation.py --list

mutmut 3 mutates a copy of the sources in `mutants/` and runs the tests from there, so one
configuration covers one selection of tests. This script makes a scratch copy of the
repository per module (.mutmut/<module>/, git-ignored), writes the module and its tests into
the scratch copy's setup.cfg [mutmut] section (the base settings are this repository's
setup.cfg), and runs `mutmut run` there with one worker (the machine is shared). Results stay
in the scratch folder: `cd .mutmut/<module> && mutmut results` / `mutmut show <mutant>`.
Known survivors, killed or explained, are listed in tests/MUTATION.md.
"""

from __future__ import annotations

import argparse
import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# module -> (its file, the fast tests that cover it: pytest arguments for mutmut's stats run).
# Keep each selection to tests that take seconds: every mutant runs the tests that reach it.
MODULES: dict[str, tuple[str, list[str]]] = {
    "optim.optimizers": ("framework/optim/optimizers.py", [
        "tests/test_optim.py", "tests/test_optim_step.py", "tests/test_amp.py", "tests/test_nonfinite.py",
        "-k", "not quickstart and not float16_scale_backs_off and not tool and not rank and not raise_stops "
              "and not skip_skips and not too_many"]),
    "optim.schedulers": ("framework/optim/schedulers.py", ["tests/test_schedulers.py", "tests/test_optim.py"]),
    "runtime.thread_tuning": ("framework/runtime/thread_tuning.py", ["tests/test_thread_tuning.py", "-k", "not a_run"]),
    "optim.ownership": ("framework/optim/ownership.py", ["tests/test_optim_ownership.py", "tests/test_optim.py"]),
    "config.metric_direction": ("framework/config/metric_direction.py", ["tests/test_metric_direction.py"]),
    # (test_checkpoints.py's killed-mid-write test forks a writer that did not get halfway in 60 s
    # under mutmut on the shared machine, which stops mutmut's stats run: left out)
    "checkpoint.files": ("framework/checkpoint/files.py", ["tests/test_checkpoint_files.py"]),
    "serialization.weights_file": ("framework/serialization/weights_file.py", ["tests/test_checkpoint_files.py"]),
    "serialization.pickle_globals": ("framework/serialization/pickle_globals.py", ["tests/test_checkpoint_files.py"]),
    "engine.resume": ("framework/engine/resume.py", ["tests/test_resume_choice.py"]),  # test_resume.py trains
    "engine.random_state": ("framework/engine/random_state.py", ["tests/test_random_state.py"]),
    "runtime.workdir": ("framework/runtime/workdir.py", ["tests/test_workdir_lock.py", "tests/test_workdir.py",
                                                       "-k", "workdir_lock or another_user"]),
    "weights.partial_load": ("framework/weights/partial_load.py", [
        "tests/test_partial_load.py", "tests/test_pretrained.py", "-k", "not training_run and not resnet50 and not frozen"]),
    "data.cache": ("framework/data/cache.py", ["tests/test_data_cache.py"]),
    "metrics.segmentation": ("framework/metrics/segmentation.py", ["tests/test_metrics.py"]),
    "metrics.base": ("framework/metrics/base.py", ["tests/test_metrics.py"]),
    "losses.gan": ("framework/losses/gan.py", ["tests/test_gan_toolkit.py", "tests/test_gan.py",
                                               "tests/test_cyclegan_toolkit.py", "tests/test_gan_parts.py",
                                               "tests/test_synthesis_task.py"]),
    "tasks.discriminator_step": ("framework/tasks/discriminator_step.py", [
        "tests/test_gan_toolkit.py", "tests/test_gan.py", "tests/test_cyclegan_toolkit.py"]),
    "models.diff_augment": ("framework/models/diff_augment.py", ["tests/test_gan_toolkit.py", "tests/test_gan.py"]),
    "losses.perceptual": ("framework/losses/perceptual.py", ["tests/test_perceptual_loss.py"]),
    "metrics.image": ("framework/metrics/image.py", ["tests/test_image_metrics.py"]),
    "models.discriminators": ("framework/models/discriminators.py", ["tests/test_gan_toolkit.py",
                                                                     "tests/test_cyclegan_toolkit.py"]),
    "runtime.precision": ("framework/runtime/precision.py", ["tests/test_precision.py", "tests/test_memory_format.py"]),
    "data.unpaired": ("framework/data/unpaired.py", ["tests/test_cyclegan.py", "-k", "unpaired"]),
    "losses.hard_pixels": ("framework/losses/hard_pixels.py", ["tests/test_hard_pixel_losses.py",
                                                               "-k", "not training and not every_rank"]),
    "losses.feature_matching": ("framework/losses/feature_matching.py", ["tests/test_gan_toolkit.py"]),
    "tasks.image_pool": ("framework/tasks/image_pool.py", ["tests/test_cyclegan.py"]),
    "tasks.adversary": ("framework/tasks/adversary.py", ["tests/test_gan_parts.py", "tests/test_gan.py",
                                                         "tests/test_gan_toolkit.py", "tests/test_cyclegan_toolkit.py",
                                                         "tests/test_synthesis_task.py",
                                                         "tests/test_adversary_schedule.py"]),
    "tasks.ema": ("framework/tasks/ema.py", ["tests/test_gan_parts.py", "tests/test_gan.py"]),
    "tasks.synthesis": ("framework/tasks/synthesis.py", ["tests/test_synthesis_task.py",
                                                         "tests/test_synthesis_evaluation.py"]),
    "tasks.gan": ("framework/tasks/gan.py", ["tests/test_gan.py", "tests/test_gan_toolkit.py"]),
    "tasks.cyclegan": ("framework/tasks/cyclegan.py", ["tests/test_cyclegan.py", "tests/test_cyclegan_toolkit.py"]),
    "losses.segmentation": ("framework/losses/segmentation.py", [
        "tests/test_losses.py", "tests/test_hard_pixel_losses.py", "tests/test_class_weights.py",
        "-k", "not training and not every_rank"]),
    "losses.cross_entropy": ("framework/losses/cross_entropy.py", [
        "tests/test_losses.py", "tests/test_hard_pixel_losses.py", "tests/test_class_weights.py",
        "-k", "not training and not every_rank"]),
    "losses.pixel_base": ("framework/losses/pixel_base.py", [
        "tests/test_losses.py", "tests/test_hard_pixel_losses.py", "tests/test_class_weights.py",
        "-k", "not training and not every_rank"]),
    "metrics.generative": ("framework/metrics/generative.py", ["tests/test_generative_metrics.py"]),
    "losses.mode_seeking": ("framework/losses/mode_seeking.py", ["tests/test_synthesis_task.py"]),
    "losses.oasis": ("framework/losses/oasis.py", ["tests/test_oasis_losses.py"]),
    "models.spade": ("framework/models/spade.py", ["tests/test_spade.py"]),
    "registry": ("framework/registry.py", ["tests/test_registry.py", "tests/test_extending.py",
                                           "-k", "not next_to_a_config and not elsewhere"]),  # subprocesses: not under mutmut
    "data.folder": ("framework/data/folder.py", ["tests/test_data.py", "tests/test_check_dataset.py",
                                                 "tests/test_channels_data.py", "tests/test_infer.py",
                                                 "tests/test_exif_orientation.py"]),
    # the published layouts: their tables, pairing and refusals (tests/test_published_*.py, seconds)
    **{f"data.published.{name}": (f"framework/data/published/{name}.py", [
        "tests/test_published_tables.py", "tests/test_published_refusals.py", "tests/test_published_voc_sbd.py",
        "tests/test_published_instance_edges.py", "tests/test_published_reading.py", "tests/test_published_encodings.py",
        "-k", "not two_iterations and not one_side and not check_dataset"])
       for name in ("common", "cityscapes", "ade20k", "cocostuff")},
    "data.published.voc": ("framework/data/published/voc.py", [  # + the VOC tests of test_data.py
        "tests/test_published_voc_sbd.py", "tests/test_published_refusals.py", "tests/test_data.py", "-k",
        "voc or VOC or trainaug or sbd or mat or pass_their_labels"]),
    "engine.hooks.early_stopping": ("framework/engine/hooks/early_stopping.py", [
        "tests/test_early_stopping.py", "-k", "not crash and not two_processes"]),
    "engine.nonfinite": ("framework/engine/nonfinite.py", ["tests/test_nonfinite.py", "-k", "not rank_1"]),
    "data.base": ("framework/data/base.py", ["tests/test_data.py", "tests/test_exif_orientation.py",
                                             "tests/test_channels_data.py"]),
    "analysis.dataset_scan": ("framework/analysis/dataset_scan.py", [
        "tests/test_check_dataset.py", "tests/test_exif_orientation.py", "tests/test_class_weights.py",
        "-k", "not training and not every_rank"]),
    "analysis.class_weights": ("framework/analysis/class_weights.py", [
        "tests/test_class_weights.py", "tests/test_check_dataset.py", "-k", "not training and not every_rank"]),
    "data.images": ("framework/data/images.py", ["tests/test_data.py", "projects/pix2pix/tests",
                                                 "projects/dcgan/tests"]),
    "tasks.gan_health": ("framework/tasks/gan_health.py", ["tests/test_tensorboard.py", "-k", "gan_health"]),
    "config.rules": ("framework/config/rules.py", ["tests/test_config_ranges.py", "tests/test_config.py",
                                                   "tests/test_config_finite.py", "-k", "not refuses_clip_grad and not train_refuses"]),
    # (test_compare.py's other tests train through tools/compare.py: seconds per mutant, left out)
    "comparison.summary": ("framework/comparison/summary.py", [
        "tests/test_comparison_summary.py",
        "tests/test_compare.py::test_best_leaves_out_the_untrained_network_and_follows_the_direction",
        "tests/test_compare.py::test_paired_differences_count_only_common_seeds_and_ties_as_neither"]),
    "comparison.report": ("framework/comparison/report.py", ["tests/test_comparison_summary.py"]),
    "config.loading": ("framework/config/loading.py", ["tests/test_config.py", "tests/test_config_ranges.py",
                                                       "tests/test_config_finite.py", "tests/test_metric_direction.py",
                                                       "-k", "not refuses_clip_grad and not train_refuses"]),
}

COPIED = ["framework", "tests", "benchmarks", "configs", "tools", "projects", "docs", "pytest.ini", "setup.py"]


def scratch_copy(module: str) -> Path:
    """A fresh copy of the repository's sources and tests with the module's mutmut section."""
    path, tests = MODULES[module]
    scratch = REPO / ".mutmut" / module
    if scratch.exists():
        shutil.rmtree(scratch)
    scratch.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in COPIED:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, scratch / name, ignore=ignore)
        else:
            shutil.copy2(source, scratch / name)
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    config["mutmut"]["only_mutate"] = path
    config["mutmut"]["pytest_add_cli_args_test_selection"] = "\n" + "\n".join(tests)
    with open(scratch / "setup.cfg", "w") as f:
        config.write(f)
    return scratch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("module", nargs="?", choices=sorted(MODULES))
    parser.add_argument("--list", action="store_true", help="the modules and their tests")
    parser.add_argument("--max-children", type=int, default=1, help="mutants tested at once (default 1)")
    args = parser.parse_args()
    if args.list or not args.module:
        for name, (path, tests) in MODULES.items():
            print(f"{name:26} {path:40} {' '.join(tests)}")
        return 0
    scratch = scratch_copy(args.module)
    env = {**os.environ, "PYTHONPATH": "", "OMP_NUM_THREADS": "1"}  # the mutated copy, not an install
    # One temp folder, emptied by each pytest run: pytest's own numbered folders under /tmp were
    # not cleaned up between mutmut's runs (3510 of them, 72 GB, filled the disk once).
    env["PYTEST_ADDOPTS"] = f"--basetemp={scratch.parent / (args.module + '.pytest-tmp')}"
    mutmut = shutil.which("mutmut") or "mutmut"
    code = subprocess.call([mutmut, "run", "--max-children", str(args.max_children)], cwd=scratch, env=env)
    subprocess.call([mutmut, "results"], cwd=scratch, env=env)  # the survivors, by name
    subprocess.call([mutmut, "export-cicd-stats"], cwd=scratch, env=env, stdout=subprocess.DEVNULL)
    print((scratch / "mutants/mutmut-cicd-stats.json").read_text())  # killed / survived / no_tests / total
    print(f"results kept in {scratch} (mutmut results / mutmut show <name> there)", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
