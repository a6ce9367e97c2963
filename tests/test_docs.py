"""The documentation site: the generated config reference is fresh, `mkdocs build --strict` passes
(no broken link or anchor), and the pages' complete examples run as written."""

import importlib.util
import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from urllib.parse import unquote, urlsplit

import cv2
import numpy as np
import pytest
import yaml

from support import REPO, call_tool, code_blocks, run_tool

DOCS = REPO / "docs"
TINY_RUN = ["device=cpu", "train.max_iters=2", "train.val_interval=2", "train.ckpt_interval=2", "train.log_interval=1"]


def generator():
    spec = importlib.util.spec_from_file_location("gen_config_reference", DOCS / "gen_config_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_config_reference_is_generated_from_the_schema_and_fresh():
    rendered = generator().render()
    assert (DOCS / "config-reference.md").read_text() == rendered, \
        "docs/config-reference.md is stale: run python docs/gen_config_reference.py"
    from framework.config.schema import DEFAULTS
    for key in ("train.nan_max_skips", "dist.timeout", "amp.dtype", "cache_limit_mb", "min_loaded_ratio"):
        assert f"| `{key.rsplit('.', 1)[-1]}` |" in rendered, key
    assert f"| `keep_last` | an integer &gt;= 0 | `{DEFAULTS['train']['keep_last']}` |" in rendered


def test_a_key_without_a_meaning_stops_the_generator(monkeypatch):
    module = generator()
    monkeypatch.delitem(module.DESCRIPTIONS, "train.best_mode")
    with pytest.raises(SystemExit, match=r"keys without a meaning: train.best_mode"):
        module.render()


@pytest.fixture(scope="module")
def built_site(tmp_path_factory):
    """The site as `mkdocs build --strict` writes it, built once for the tests that read it."""
    if importlib.util.find_spec("mkdocs") is None:
        pytest.fail('mkdocs is not installed: pip install -e ".[dev]" (the docs are built in CI)')
    site = tmp_path_factory.mktemp("docs") / "site"
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    return site, result


def test_mkdocs_build_strict(built_site):
    site, result = built_site
    assert result.returncode == 0, result.stderr[-3000:]
    assert (site / "config-reference" / "index.html").is_file()


class ImageSources(HTMLParser):
    def __init__(self):
        super().__init__()
        self.sources: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.sources.append(dict(attrs).get("src") or "")


def test_every_image_the_site_shows_exists_and_loads(built_site):
    """What a browser would fetch for each <img> of the built pages: a file of the site that
    decodes (mkdocs --strict checks markdown links, not that a picture is a picture)."""
    from PIL import Image

    site, result = built_site
    assert result.returncode == 0, result.stderr[-3000:]
    shown, pages = set(), set()
    for page in site.rglob("*.html"):
        parser = ImageSources()
        parser.feed(page.read_text(encoding="utf-8"))
        for source in parser.sources:
            assert not urlsplit(source).scheme, f"{page.relative_to(site)}: <img src={source!r}> is fetched from elsewhere"
            path = (page.parent / unquote(urlsplit(source).path)).resolve()
            assert path.is_file(), f"{page.relative_to(site)}: <img src={source!r}>: no {path.relative_to(site.resolve())}"
            with Image.open(path) as image:
                image.load()  # decodes the whole file: a truncated one fails here
            shown.add(str(path.relative_to(site.resolve())))
            pages.add(str(page.relative_to(site)))
    assert any(name.startswith("gallery/") for name in shown), "the gallery's images are on no page"
    assert "index.html" in pages, "the home page shows no image"


def test_the_extending_page_trains_as_written(tmp_path):
    """Its python blocks form my_modules.py, its yaml block the config: a model, a loss, a dataset,
    a hook and a task of the user's, trained in a new process as a user would."""
    python = [block for block in code_blocks("extending.md", "python") if "    ...\n" not in block]
    (tmp_path / "my_modules.py").write_text("\n\n".join(python))
    config = code_blocks("extending.md", "yaml", "The config")[0].replace("configs/segmentation/", f"{REPO}/configs/segmentation/")
    (tmp_path / "my.yaml").write_text(config)
    result = run_tool("train", "--config", tmp_path / "my.yaml", "--work-dir", tmp_path / "run", *TINY_RUN)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "best_score.json").read_text())["iter"] == 2  # the hook ran
    record = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    assert {"IoU.even", "IoU.odd"} <= record.keys()  # the dataset's class names
    assert "loss_confidence" in (tmp_path / "run" / "train.log").read_text()  # the task's own term
    assert "loss_softmax_focal" in (tmp_path / "run" / "train.log").read_text()  # the loss's name


def test_your_own_folders_config_trains_as_written(tmp_path, monkeypatch):
    root = tmp_path / "roads"
    rng = np.random.default_rng(0)
    for folder in ("images", "masks"):
        (root / folder).mkdir(parents=True)
    for i in range(6):
        cv2.imwrite(str(root / "images" / f"{i:04d}.jpg"), rng.integers(0, 256, (256, 288, 3), dtype=np.uint8))
        cv2.imwrite(str(root / "masks" / f"{i:04d}.png"), rng.integers(0, 3, (256, 288), dtype=np.uint8))
    (root / "train.txt").write_text("0000\n0001\n0002\n0003\n")
    (root / "val.txt").write_text("0004\n0005\n")
    block = code_blocks("getting-started.md", "yaml", "Your own folders")[0]
    config = yaml.safe_load(block.replace("~/data/roads", str(root)))
    config["_base_"] = [str(REPO / base) for base in config["_base_"]]
    (tmp_path / "my_roads.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.chdir(tmp_path)
    commands = [line.split("#")[0].split() for line in code_blocks("getting-started.md", "bash", "Your own folders")[0]
                .splitlines() if line.strip()]
    assert [c[1] for c in commands] == ["tools/check_dataset.py", "tools/train.py"]
    tiny = [*TINY_RUN, "task.model.base_channels=4", "task.model.depth=2", "data.train.batch_size=2",
            "data.train.num_workers=0", "data.val.num_workers=0"]
    for command in commands:
        tool = command[1].removeprefix("tools/").removesuffix(".py")
        result = call_tool(tool, *command[2:], *(tiny if tool == "train" else []))
        assert result.returncode == 0, f"{' '.join(command)}\n{result.stdout[-2000:]}{result.stderr}"
    record = json.loads((tmp_path / "work_dirs" / "my_roads" / "metrics.jsonl").read_text().splitlines()[-1])
    assert {"IoU.background", "IoU.road", "IoU.marking"} <= record.keys()


@pytest.mark.parametrize("overrides", [
    ["+optimiser=1"], ["train.max_iter=5"], ["task.model.type=UNett"], ["+task.model.foo=1"], ["optim=null"],
    ["train.max_iters=null"], ["train.max_iters=abc"],
], ids=lambda o: o[0])
def test_troubleshooting_quotes_the_config_errors_as_the_tools_print_them(tmp_path, overrides):
    config = REPO / "configs/segmentation/unet_shapes.yaml"
    result = call_tool("train", "--config", config, "--work-dir", tmp_path / "run", *overrides)
    assert result.returncode == 2
    line = result.stderr.strip().splitlines()[0].replace(str(config), "cfg.yaml")
    assert f"`{line}`" in (DOCS / "troubleshooting.md").read_text(), line


def test_the_reading_map_names_ten_files_that_hold_what_it_says():
    """docs/architecture.md's reading map (what the README promises instead of "an afternoon"): at
    most ten files, in the order a training step runs through them, each existing; the first name
    a row puts in backticks is defined there (`Trainer.fit` as `def fit`), the others appear there."""
    text = (REPO / "docs/architecture.md").read_text()
    section = text.split("## Reading map", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:4] for line in section.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert 5 <= len(rows) <= 10
    assert [int(number) for number, _, _ in rows] == list(range(1, len(rows) + 1))
    for k, (_, file, role) in enumerate(rows):
        path = REPO / file.strip().strip("`")
        assert path.is_file(), file
        source = path.read_text()
        names = [name for name in re.findall(r"`([A-Za-z_][\w.]*)`", role) if "/" not in name]
        assert names or k == 0, f"{file}: its row names nothing it defines"
        for position, name in enumerate(names):
            last = name.split(".")[-1]
            pattern = rf"(def|class) {last}\b" if position == 0 else rf"\b{last}\b"
            assert re.search(pattern, source), f"{file}: no {name}"


def test_every_test_file_is_in_the_tests_readme_table_once():
    """tests/README.md tells a newcomer which file guards what: every tests/test_*.py is in its
    table exactly once, and it names no file that is gone."""
    table = (REPO / "tests/README.md").read_text()
    listed = re.findall(r"`(test_\w+\.py)`", table)
    present = sorted(path.name for path in (REPO / "tests").glob("test_*.py"))
    assert sorted(set(listed)) == present and len(listed) == len(set(listed))
