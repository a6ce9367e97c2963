"""benchmarks/ as a suite, not a pile (issue 65): no script at its root, each folder's README table
lists exactly the scripts in it with a docs link that resolves, every `benchmarks/...py` path the
docs, tests and code cite exists, and the release suite's runner covers its whole folder."""

import re
import subprocess
import sys
from pathlib import Path

from support import REPO

BENCH = REPO / "benchmarks"
GROUPS = sorted(folder for folder in BENCH.iterdir() if folder.is_dir() and folder.name != "__pycache__")


def slug(title: str) -> str:
    """The anchor mkdocs (Python-Markdown's toc) gives a heading."""
    title = re.sub(r"[^\w\s-]", "", title).strip().lower()
    return re.sub(r"[-\s]+", "-", title)


def anchors(doc: Path) -> set[str]:
    return {slug(line.lstrip("#").strip()) for line in doc.read_text().splitlines() if line.startswith("#")}


def test_no_script_at_the_root_and_every_folder_has_its_table():
    assert sorted(path.name for path in BENCH.glob("*.py")) == []
    assert {folder.name for folder in GROUPS} == {"gpu", "helpers", "plain", "quality", "release", "studies"}
    for folder in GROUPS:
        table = (folder / "README.md").read_text()
        listed = re.findall(r"^\| `(\w+\.py)` \|", table, flags=re.MULTILINE)
        assert sorted(listed) == sorted(path.name for path in folder.glob("*.py")), folder.name
        assert len(listed) == len(set(listed))


def test_every_docs_link_of_the_tables_resolves():
    for readme in [BENCH / "README.md", *(folder / "README.md" for folder in GROUPS)]:
        for target in re.findall(r"\]\(([^)]+)\)", readme.read_text()):
            page, _, anchor = target.partition("#")
            path = (readme.parent / page).resolve()
            assert path.is_file(), f"{readme.relative_to(REPO)}: {target}"
            if anchor:
                assert anchor in anchors(path), f"{readme.relative_to(REPO)}: {target}"


def test_every_cited_benchmark_path_exists():
    cited = set()
    for root in ("docs", "tests", "benchmarks", "framework", "tools", "README.md"):
        for path in [REPO / root] if root.endswith(".md") else (REPO / root).rglob("*"):
            if path.suffix in (".md", ".py", ".yaml") and path.is_file():
                cited |= set(re.findall(r"benchmarks/[\w/]+\.py", path.read_text(errors="ignore")))
    assert cited and sorted(path for path in cited if not (REPO / path).is_file()) == []


def test_the_release_runner_covers_its_folder():
    plan = subprocess.run([sys.executable, str(BENCH / "release/run.py"), "--dry-run"], capture_output=True,
                          text=True, check=True).stdout
    scripts = {Path(line.split()[1]).name for line in plan.splitlines()}
    assert scripts == {path.name for path in (BENCH / "release").glob("*.py")} - {"run.py"}
    refused = subprocess.run([sys.executable, str(BENCH / "release/run.py"), str(BENCH)], capture_output=True, text=True)
    assert refused.returncode == 2 and "not an empty folder" in refused.stderr
