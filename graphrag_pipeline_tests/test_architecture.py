"""The architecture's import contracts (pyproject.toml [tool.importlinter], explained in ARCHITECTURE.md) hold, and
the checker really catches a violation."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def lint_imports(project: Path) -> subprocess.CompletedProcess:
    """`lint-imports` on the package in `project`, with that folder's pyproject.toml."""
    return subprocess.run([str(Path(sys.executable).with_name("lint-imports")), "--config", "pyproject.toml",
                           "--no-cache"], cwd=project, env={"PYTHONPATH": str(project), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=300)


def test_the_import_contracts_hold():
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 4 kept, 0 broken." in result.stdout


def copy_with_a_shortcut(tmp_path: Path, module: str, shortcut: str) -> subprocess.CompletedProcess:
    """lint-imports over a copy of the package in which ``module`` (a path under it) starts with ``shortcut``."""
    shutil.copytree(REPO / "graphrag_pipeline", tmp_path / "graphrag_pipeline",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    source = tmp_path / "graphrag_pipeline" / module
    source.write_text(f"{shortcut}  # a shortcut someone took\n" + source.read_text())
    return lint_imports(tmp_path)


def test_a_library_module_importing_dagster_breaks_a_contract(tmp_path):
    result = copy_with_a_shortcut(tmp_path, "lib/core/ids.py", "import dagster")

    assert result.returncode != 0
    assert "The library, the query module and the server never import Dagster BROKEN" in result.stdout
    assert "graphrag_pipeline.lib.core.ids -> dagster" in result.stdout


def test_a_store_importing_a_stage_breaks_the_layers(tmp_path):
    result = copy_with_a_shortcut(tmp_path, "lib/stores/neo4j_graph.py", "from graphrag_pipeline.lib.stages import report")

    assert result.returncode != 0
    assert "Layers: every package of ARCHITECTURE.md, each importing only those below it BROKEN" in result.stdout
    assert "graphrag_pipeline.lib.stores.neo4j_graph -> graphrag_pipeline.lib.stages.report" in " ".join(
        result.stdout.split())  # the report wraps long lines


def test_the_postgresql_state_store_importing_the_sqlite_one_breaks_their_independence(tmp_path):
    result = copy_with_a_shortcut(tmp_path, "lib/stores/state/postgres.py",
                                  "from graphrag_pipeline.lib.stores.state import sqlite")

    assert result.returncode != 0
    assert "Stores never import each other BROKEN" in result.stdout
