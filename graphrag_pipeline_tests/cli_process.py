"""The command line as a subprocess, run from the checkout under test.

`python -m graphrag_pipeline.cli` with this checkout first on PYTHONPATH, not the installed `graphrag-pipeline`
console script: the script imports whatever checkout the venv was installed from, which need not be the one these
tests belong to (a second worktree sharing the venv would test the first one's code)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
CLI = (sys.executable, "-m", "graphrag_pipeline.cli")


def cli_env(config: Path | None = None) -> dict[str, str]:
    """This process's environment with this checkout first on PYTHONPATH, without $GRAPHRAG_CONFIG (or set to
    `config`)."""
    env = {k: v for k, v in os.environ.items() if k != "GRAPHRAG_CONFIG"}
    env["PYTHONPATH"] = os.pathsep.join([str(CHECKOUT), *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    if config is not None:
        env["GRAPHRAG_CONFIG"] = str(config)
    return env


def run_cli(*args: str, cwd: Path, config: Path | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    """`graphrag-pipeline <args>` with $GRAPHRAG_CONFIG set to `config` (or unset), output captured as text."""
    return subprocess.run([*CLI, *args], cwd=cwd, env=cli_env(config), capture_output=True, text=True,
                          timeout=timeout)
