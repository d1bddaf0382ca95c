"""The README is the front page (what it is, the two commands, a tour, links); the rest is the docs/ site, which
must build with every page in the navigation and every link and anchor resolving."""

import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
README_LIMIT_BYTES = 15_000


def test_the_docs_site_builds_strictly(tmp_path):
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                           cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    listed = {next(iter(entry.values())) for entry in config["nav"]}
    assert listed == {path.name for path in (ROOT / "docs").glob("*.md")}  # no page outside the navigation


def test_the_readme_is_short_and_its_links_lead_somewhere():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) < README_LIMIT_BYTES
    local = [target for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme) if "://" not in target]
    assert local and all((ROOT / target).is_file() for target in local), local
