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


def test_a_library_module_importing_dagster_breaks_a_contract(tmp_path):
    shutil.copytree(REPO / "graphrag_pipeline", tmp_path / "graphrag_pipeline",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    ids = tmp_path / "graphrag_pipeline" / "lib" / "ids.py"
    ids.write_text("import dagster  # a shortcut someone took\n" + ids.read_text())

    result = lint_imports(tmp_path)

    assert result.returncode != 0
    assert "The library, the query module and the server never import Dagster BROKEN" in result.stdout
    assert "graphrag_pipeline.lib.ids -> dagster" in result.stdout
