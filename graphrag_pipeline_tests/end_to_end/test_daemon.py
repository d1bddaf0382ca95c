"""Unattended sync as users run it: a real `dagster-daemon` with the shipped dagster.yaml keeps an index fresh.

Nothing is launched by hand: the daemon's source sensors see a folder and a Confluence space (the local fixture server
speaking Confluence's REST API), request shard runs, and the automation sensor follows them with the corpus-wide
chain (element summaries → graph → communities → community summaries). Documents with typed facts are added, edited
and deleted in both sources while the daemon runs; each change must reach the graph and the query results within a
timeout, or the test fails with the daemon's log and the runs it launched.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import pytest
import yaml

from graphrag_pipeline.defs.automation.sensors import graphrag_automation_sensor
from graphrag_pipeline.lib.core.config import load_settings
from graphrag_pipeline.lib.stores.embedded_graph import EmbeddedGraphStore
from graphrag_pipeline.query import open_index
from graphrag_pipeline_tests.confluence_server import ConfluenceServer
from graphrag_pipeline_tests.conftest import FIXTURES

pytestmark = [pytest.mark.slow, pytest.mark.server]

REPO = Path(__file__).resolve().parents[2]
PHASE_TIMEOUT_SECONDS = 900  # a bound, not a measurement: runs start as subprocesses that each load the models
AUTOMATION_TICKS_TO_WATCH = 2  # ticks of the automation sensor after the chain ran that must request nothing

CHECKOUT = "# Checkout Service\n\nCheckout Service depends on {dependency}.\n\nCheckout Service is owned by Team Falcon.\n"
QUARTZ = "# Quartz Gateway\n\nQuartz Gateway depends on Checkout Service.\n\nQuartz Gateway is owned by Team Heron.\n"
BILLING = "<p>Billing Worker depends on {dependency}.</p><p>Billing Worker is owned by Team Heron.</p>"
REFUND = "<p>Refund Service depends on Billing Worker.</p><p>Refund Service is owned by Team Falcon.</p>"
SECRET = "ORCA-4471"
OVERRIDE = ("---\naccess_groups: [sre-leads]\n---\n# Vault Cache override\n\nVault Cache depends on Quartz Gateway "
            f"during an override. The override code is {SECRET}.\n")
OVERRIDE_QUESTION = "What is the override code of the Vault Cache, and what does it depend on during an override?"


@pytest.fixture(scope="module")
def confluence() -> Iterator[ConfluenceServer]:
    with ConfluenceServer() as server:
        yield server


@pytest.fixture(scope="module")
def project(tmp_path_factory, confluence) -> Path:
    """A DAGSTER_HOME holding the shipped dagster.yaml unchanged, a pipeline config with a folder and a Confluence
    source, and a workspace file whose working directory is this folder (the instance's paths are relative)."""
    root = tmp_path_factory.mktemp("daemon")
    shutil.copy(REPO / "dagster.yaml", root / "dagster.yaml")
    (root / "workspace.yaml").write_text(yaml.safe_dump({"load_from": [{"python_module": {
        "module_name": "graphrag_pipeline.definitions", "working_directory": str(root),
        "location_name": "graphrag_pipeline"}}]}))
    corpus = root / "runbooks"
    corpus.mkdir()
    (corpus / "checkout.md").write_text(CHECKOUT.format(dependency="Ledger Store"))
    (corpus / "override.md").write_text(OVERRIDE)
    for name in ("NodeRAIDDegraded.md", "KubePodCrashLooping.md"):
        shutil.copy(FIXTURES / "runbooks" / name, corpus / name)
    (root / "graphrag.yaml").write_text(yaml.safe_dump({
        "index_dir": "index",
        "shard_count": 2,
        "sources": [
            {"name": "runbooks", "kind": "folder", "path": "runbooks", "poll_interval_seconds": 0},
            {"name": "wiki", "kind": "confluence", "base_url": confluence.base_url, "spaces": ["OPS"],
             "poll_interval_seconds": 0},
        ],
        # The user's own vocabulary: typed names the spotters find wherever a document mentions them.
        "extraction": {"dictionary": {
            "Service": ["Checkout Service", "Ledger Store", "Vault Cache", "Quartz Gateway", "Billing Worker",
                        "Refund Service"],
            "Team": ["Team Falcon", "Team Heron"],
        }},
    }))
    return root


def test_on_a_fresh_instance_every_sensor_and_schedule_of_the_sync_is_running(project):
    """What an operator sees before starting anything: `dagster sensor list` / `schedule list` on the shipped
    dagster.yaml with an empty DAGSTER_HOME."""
    env = {**os.environ, "DAGSTER_HOME": str(project), "GRAPHRAG_CONFIG": str(project / "graphrag.yaml")}
    listed = ""
    for what in ("sensor", "schedule"):
        result = subprocess.run([sys.executable, "-m", "dagster", what, "list", "-w", str(project / "workspace.yaml")],
                                cwd=project, env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr
        listed += result.stdout
    for name in ("folder_source_sensor", "confluence_source_sensor", "catalog_source_sensor",
                 "eval_set_source_sensor", "graphrag_automation_sensor", "daily_refresh", "daily_corpus_refresh"):
        assert re.search(rf"(Sensor|Schedule): {name} \[RUNNING\]", listed), listed
    assert "STOPPED" not in listed


@pytest.fixture(scope="module")
def daemon(project, confluence) -> Iterator[subprocess.Popen]:
    env = {**os.environ, "DAGSTER_HOME": str(project), "GRAPHRAG_CONFIG": str(project / "graphrag.yaml"),
           "CONFLUENCE_USER": confluence.user, "CONFLUENCE_TOKEN": confluence.token}
    log = (project / "daemon.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "dagster._daemon", "run", "-w", str(project / "workspace.yaml")],
        cwd=project, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        yield process
    finally:
        os.killpg(process.pid, signal.SIGTERM)  # the daemon, its code server and any run it launched
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        _kill_session(process.pid)
        log.close()


def _kill_session(session_id: int) -> None:
    """Whatever the daemon started and left behind in its session (a code server that put itself in a process group
    of its own outlives the group signal): nothing of this test may outlive it."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getsid(int(entry.name)) == session_id:
                    os.kill(int(entry.name), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def facts(project: Path) -> set[tuple[str, str, str]]:
    """(source name, type, target name) of every relationship in the index's graph, names lower-cased."""
    path = project / "index" / "graph.sqlite"
    if not path.is_file():
        return set()
    try:
        graph = EmbeddedGraphStore(path, read_only=True)
    except ValueError:  # the daemon's first run has made the file and not yet committed its schema: no facts yet
        return set()
    try:
        relationships = graph.get_relationships(graph.all_relationship_ids())
        names = {eid: e.name.lower() for eid, e in graph.get_entities(graph.all_entity_ids()).items()}
    finally:
        graph.close()
    return {(names[r.source_id], r.type, names[r.target_id]) for r in relationships.values()}


def entity_documents(project: Path) -> dict[str, set[str]]:
    graph = EmbeddedGraphStore(project / "index" / "graph.sqlite", read_only=True)
    try:
        return {e.name.lower(): set(e.doc_ids) for e in graph.get_entities(graph.all_entity_ids()).values()}
    finally:
        graph.close()


def answer_documents(project: Path, question: str) -> list[str]:
    with open_index(settings=load_settings(project / "graphrag.yaml")) as index:
        return [result.doc_id for result in index.query(question, top_k=5).results]


def public_answer(project: Path, groups: tuple[str, ...] = ()) -> str:
    """Everything a caller of ``groups`` is answered about the restricted override, in every mode and as a context,
    as JSON ("" while no index is published yet)."""
    try:
        index = open_index(settings=load_settings(project / "graphrag.yaml"))
    except FileNotFoundError:
        return ""
    with index:
        answers = [index.query(OVERRIDE_QUESTION, mode=mode, groups=groups).to_dict()
                   for mode in ("vector", "keyword", "graph", "hybrid", "global")]
        answers.append(index.context("Vault Cache", groups=groups).to_dict())
    return json.dumps(answers)


@contextmanager
def _in_directory(path: Path) -> Iterator[None]:
    previous = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


def launched_runs(project: Path) -> list[str]:
    """The daemon's runs, oldest first, as `job [status] tags`, read from the instance (its storage paths are relative
    to its folder)."""
    from dagster import DagsterInstance

    with _in_directory(project):
        instance = DagsterInstance.from_config(str(project))
        try:
            return [f"{run.job_name} [{run.status.value}] {dict(sorted(run.tags.items()))}"
                    for run in reversed(instance.get_runs())]
        finally:
            instance.dispose()


def idle(project: Path) -> bool:
    """Every run the daemon launched has ended: the graph's facts alone would show up while the corpus-wide run is
    still writing the vectors that come after them."""
    ended = ("[SUCCESS]", "[FAILURE]", "[CANCELED]")
    return all(any(state in run for state in ended) for run in launched_runs(project))


def wait_for(project: Path, daemon: subprocess.Popen, what: str, condition: Callable[[], bool],
             probe: Callable[[], None] = lambda: None) -> None:
    """Until ``condition`` holds, calling ``probe`` between checks (what a caller sees while the daemon's runs
    write)."""
    started = time.monotonic()
    deadline = started + PHASE_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        assert daemon.poll() is None, f"dagster-daemon exited with {daemon.returncode}:\n{_log_tail(project)}"
        probe()
        if condition():
            print(f"{what}: {time.monotonic() - started:.0f} s")  # a figure for the README (pytest -s shows it)
            return
        time.sleep(3)
    runs = "\n".join(launched_runs(project)) or "(none)"
    pytest.fail(f"{what}: not reached within {PHASE_TIMEOUT_SECONDS} s.\nRuns:\n{runs}\nDaemon log:\n"
                f"{_log_tail(project)}")


def _log_tail(project: Path, lines: int = 60) -> str:
    return "\n".join((project / "daemon.log").read_text(errors="replace").splitlines()[-lines:])


@pytest.fixture(scope="module")
def pages(confluence) -> dict[str, str]:
    return {
        "billing": confluence.add_page("OPS", "Billing Worker", BILLING.format(dependency="Ledger Store")),
        "escalation": confluence.add_page("OPS", "Payments escalation", "<p>Page Team Falcon for payments.</p>"),
        "retired": confluence.add_page("OPS", "Old dashboard", "<p>The Grafana board for Billing Worker.</p>"),
    }


@pytest.fixture(scope="module")
def first_sync(project, pages, daemon) -> Path:
    wait_for(project, daemon, "the first sync (folder and Confluence) in the graph", lambda: {
        ("checkout service", "DEPENDS_ON", "ledger store"), ("checkout service", "OWNED_BY", "team falcon"),
        ("billing worker", "DEPENDS_ON", "ledger store"), ("billing worker", "OWNED_BY", "team heron"),
    } <= facts(project) and idle(project))
    return project


def test_the_daemon_builds_the_index_from_both_sources_with_no_run_launched_by_hand(first_sync, pages):
    assert "runbooks:checkout.md" in answer_documents(first_sync, "Which services does Checkout Service depend on?")
    assert f"wiki:{pages['billing']}" in answer_documents(first_sync, "Who owns the Billing Worker?")
    assert SECRET in public_answer(first_sync, groups=("sre-leads",)) and SECRET not in public_answer(first_sync)
    runs = launched_runs(first_sync)
    assert any(run.startswith("refresh_shards [SUCCESS]") for run in runs), runs
    # The corpus-wide chain was requested by the automation sensor (or, when the test runs at 03:30 UTC, by the daily
    # corpus refresh, which then finds it to do first), not by a job anyone launched.
    assert any(("'dagster/sensor_name': 'graphrag_automation_sensor'" in run
                or "'dagster/schedule_name': 'daily_corpus_refresh'" in run) and "[SUCCESS]" in run
               for run in runs), runs
    assert all("'dagster/sensor_name'" in run or "'dagster/schedule_name'" in run for run in runs), runs
    # The chain ran once for the change: on the automation sensor's next ticks it is not requested again (a SINCE
    # nested in another re-armed it, and each later tick brought the rest of the chain once more).
    automation_runs = [run for run in runs if "graphrag_automation_sensor" in run]
    time.sleep(AUTOMATION_TICKS_TO_WATCH * (graphrag_automation_sensor.minimum_interval_seconds or 30) + 10)
    assert [run for run in launched_runs(first_sync) if "graphrag_automation_sensor" in run] == automation_runs


@pytest.fixture(scope="module")
def second_sync(first_sync, confluence, pages, daemon) -> Path:
    project = first_sync
    corpus = project / "runbooks"
    (corpus / "quartz.md").write_text(QUARTZ)
    (corpus / "checkout.md").write_text(CHECKOUT.format(dependency="Vault Cache"))
    (corpus / "NodeRAIDDegraded.md").unlink()
    (corpus / "override.md").unlink()
    pages["refund"] = confluence.add_page("OPS", "Refund Service", REFUND)
    confluence.edit_page(pages["billing"], body=BILLING.format(dependency="Vault Cache"))
    confluence.delete_page(pages["retired"])

    wanted = {("quartz gateway", "DEPENDS_ON", "checkout service"), ("checkout service", "DEPENDS_ON", "vault cache"),
              ("refund service", "DEPENDS_ON", "billing worker"), ("billing worker", "DEPENDS_ON", "vault cache")}
    gone = {("checkout service", "DEPENDS_ON", "ledger store"), ("billing worker", "DEPENDS_ON", "ledger store")}
    deleted = {"runbooks:NodeRAIDDegraded.md", "runbooks:override.md", f"wiki:{pages['retired']}"}
    public_probes: list[bool] = []  # whether the deleted restricted document's secret was in a public answer
    wait_for(project, daemon, "the added, edited and deleted documents in the graph",
             lambda: wanted <= facts(project) and not gone & facts(project)
             and not any(deleted & docs for docs in entity_documents(project).values()) and idle(project),
             probe=lambda: public_probes.append(SECRET in public_answer(project)))
    print(f"public answers probed while the daemon synced: {len(public_probes)}")
    assert not any(public_probes), f"{sum(public_probes)} of {len(public_probes)} public answers held the secret"
    return project


def test_added_documents_reach_the_graph_and_the_answers(second_sync, pages):
    assert "runbooks:quartz.md" in answer_documents(second_sync, "What depends on Checkout Service?")
    assert f"wiki:{pages['refund']}" in answer_documents(second_sync, "Which service does Refund Service depend on?")


def test_edited_documents_replace_their_facts(second_sync):
    current = facts(second_sync)
    assert ("checkout service", "DEPENDS_ON", "vault cache") in current
    assert ("billing worker", "DEPENDS_ON", "vault cache") in current
    # The old dependency was stated only by the two edited documents: its node is gone with their old versions.
    assert "ledger store" not in entity_documents(second_sync)


def test_deleted_documents_leave_the_graph_and_the_answers(second_sync, pages):
    deleted = {"runbooks:NodeRAIDDegraded.md", f"wiki:{pages['retired']}"}
    assert not any(deleted & docs for docs in entity_documents(second_sync).values())
    answers = answer_documents(second_sync, "A node RAID array is degraded: which runbook applies?")
    answers += answer_documents(second_sync, "Where is the Grafana board for Billing Worker?")
    assert not deleted & set(answers)
