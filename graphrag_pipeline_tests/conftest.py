from pathlib import Path

import pytest

from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.core.config import PipelineSettings, load_settings
from graphrag_pipeline.lib.embed.embedders import configured_embedder
from graphrag_pipeline.lib.stages import build_everything
from graphrag_pipeline_tests.postgres import postgres_server  # noqa: F401  (registers the session's PostgreSQL fixture)

FIXTURES = Path(__file__).parent / "fixtures"
SAMPLE_CORPUS = Path(__file__).parent.parent / "data" / "corpus"  # the sample corpus README command 1 indexes
SAMPLE_CATALOG = SAMPLE_CORPUS.parent / "catalog"  # and its services' catalog


def folder_settings(index_dir: Path, corpus: Path, **overrides) -> PipelineSettings:
    """Packaged defaults pointed at one folder source, with few shards so tests stay small."""
    return load_settings(
        index_dir=str(index_dir),
        sources=[{"name": "t", "kind": "folder", "path": str(corpus)}],
        shard_count=4,
        **overrides,
    )


def offline_embedder():
    """The offline embedder a build loads by default: tests that run many builds share one loaded model."""
    return configured_embedder(load_settings(), query=False)


def build(settings: PipelineSettings):
    workspace = Workspace(settings)
    try:
        return build_everything(workspace)
    finally:
        workspace.close()


@pytest.fixture(scope="session")
def multihop_settings(tmp_path_factory) -> PipelineSettings:
    settings = folder_settings(tmp_path_factory.mktemp("multihop") / "index", FIXTURES / "multihop")
    build(settings)
    return settings


@pytest.fixture(scope="session")
def sample_settings(tmp_path_factory) -> PipelineSettings:
    """The sample corpus (Prometheus runbooks, OpenTelemetry demo, Online Boutique) built on embedded defaults."""
    settings = folder_settings(tmp_path_factory.mktemp("sample") / "index", SAMPLE_CORPUS).with_overrides(
        sources=[{"name": "t", "kind": "folder", "path": str(SAMPLE_CORPUS)},
                 {"name": "sample-catalog", "kind": "catalog", "path": str(SAMPLE_CATALOG)}],
    )
    build(settings)
    return settings


_session_exit_status: list[int] = []


def pytest_sessionfinish(session, exitstatus):
    _session_exit_status.append(int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """ArcadeDB's embedded JVM (JPype, started by the Bolt contract tests) can crash the interpreter while it shuts
    down after every test has run, turning a green run into exit code 139. Once pytest has reported, leave with the
    session's own status without running the JVM's exit hooks."""
    import os
    import sys

    jpype = sys.modules.get("jpype")
    if jpype is not None and jpype.isJVMStarted() and _session_exit_status:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_session_exit_status[-1])


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that asks for the session's PostgreSQL starts a server process: it is a `server` test, so that
    `-m "not slow and not server"` is the inner loop that starts nothing."""
    for item in items:
        if "postgres_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.server)
