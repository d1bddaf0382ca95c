"""Access control, end to end: documents carry access groups from their source (here: front matter), and the query
module never returns text, entity paths, relationships or summaries derived only from documents the caller may not
read — while a caller holding the group gets them.

Two restricted documents: one about entities of its own (vault-gateway), and one (LAUNCH) about the public
services, which describes them, states a relationship between two of them that no public document states, words a
public relationship its own way and joins them into a community with the public documents' entities — the case
where every channel (facts, community summaries, exploration, run metadata) must hold back text only it supplied.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from dagster import build_asset_check_context, build_asset_context

from graphrag_pipeline.cli import main as cli_main
from graphrag_pipeline.defs.chunks.assets import chunks
from graphrag_pipeline.defs.communities.assets import communities
from graphrag_pipeline.defs.communities.checks import communities_cover_the_graph
from graphrag_pipeline.defs.community_summaries.assets import community_summaries
from graphrag_pipeline.defs.community_summaries.checks import every_summary_has_a_published_vector
from graphrag_pipeline.defs.element_summaries.assets import element_summaries
from graphrag_pipeline.defs.embeddings.assets import embeddings
from graphrag_pipeline.defs.embeddings.checks import every_chunk_has_a_published_vector
from graphrag_pipeline.defs.extracted_elements.assets import extracted_elements
from graphrag_pipeline.defs.extracted_elements.checks import quarantine_below_threshold
from graphrag_pipeline.defs.graph.assets import graph
from graphrag_pipeline.defs.graph.checks import every_entity_has_a_published_vector, graph_integrity
from graphrag_pipeline.defs.raw_documents.assets import raw_documents
from graphrag_pipeline.defs.resources import GraphRAGResource
from graphrag_pipeline.lib.stores.state.sql import COMMUNITY_SUMMARY_PAYLOADS
from graphrag_pipeline.query import explore, open_index
from graphrag_pipeline.query.access import ReaderAccess

pytestmark = pytest.mark.slow

RESTRICTED = """---
access_groups: [payments-oncall]
---
# Vault Gateway incident

The vault-gateway outage on 3 March was caused by an expired signing key held by Krzysztof Obrembski.
vault-gateway depends on hsm-proxy for every card token.
"""
PUBLIC = {
    "checkout.md": "# Checkout\n\ncheckout-service calls payments-api to charge cards.\n",
    "payments.md": "# Payments API\n\npayments-api is owned by team-payments and depends on ledger-db.\n",
}
LAUNCH = """---
access_groups: [payments-oncall]
---
# Checkout launch

checkout-service depends on ledger-db for the launch code ZEBRA-7.
checkout-service depends on payments-api to release the launch code ZEBRA-7.
"""
QUESTION = "Who held the expired signing key behind the vault-gateway outage?"
LAUNCH_QUESTION = "What does checkout-service depend on, and what does ledger-db serve?"
SECRET = "ZEBRA-7"  # what only LAUNCH says
LAUNCH_DOC = "t:launch.md"
GROUPS = ["payments-oncall"]


def write_access_corpus(corpus: Path) -> Path:
    """The two restricted and the public documents, as a folder source reads them (the HTTP and MCP tests ask the
    same corpus through their channels)."""
    corpus.mkdir(parents=True)
    (corpus / "vault-incident.md").write_text(RESTRICTED)
    (corpus / "launch.md").write_text(LAUNCH)
    for name, text in PUBLIC.items():
        (corpus / name).write_text(text)
    return corpus


SHARDS = 4


def write_access_config(root: Path, **sections: object) -> tuple[Path, Path]:
    """The access corpus under ``root`` and a configuration file indexing it, with ``sections`` added (the server's
    keys, for the HTTP and MCP tests): (corpus folder, configuration file)."""
    corpus = write_access_corpus(root / "corpus")
    config = root / "graphrag.yaml"
    config.write_text(yaml.safe_dump({
        "index_dir": str(root / "index"), "shard_count": SHARDS, "communities": {"min_size": 2},
        "sources": [{"name": "t", "kind": "folder", "path": str(corpus)}], **sections,
    }))
    return corpus, config

PER_DOCUMENT_ASSETS = (raw_documents, chunks, embeddings, extracted_elements)
CORPUS_WIDE_ASSETS = (element_summaries, graph, communities, community_summaries)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The index's settings and each asset's materialization metadata, built by invoking the Dagster assets (so
    through the metadata path a Dagster run takes), shard by shard."""
    root = tmp_path_factory.mktemp("access")
    _, config = write_access_config(root)
    resource = GraphRAGResource(config_path=str(config))
    metadata: dict[str, list[dict]] = {}
    for asset in PER_DOCUMENT_ASSETS:
        for shard in range(SHARDS):
            result = asset(build_asset_context(partition_key=f"shard-{shard:03d}"), graphrag=resource)
            metadata.setdefault(asset.key.to_user_string(), []).append(result.metadata)
    for asset in CORPUS_WIDE_ASSETS:
        metadata[asset.key.to_user_string()] = [asset(build_asset_context(), graphrag=resource).metadata]
    return resource, metadata


@pytest.fixture(scope="module")
def index(built):
    with open_index(settings=built[0].settings()) as engine:
        yield engine


def restricted_names() -> set[str]:
    return {"vault-gateway", "hsm-proxy", "Krzysztof Obrembski"}


def restricted_words() -> set[str]:
    """Text that only the restricted documents hold: names, their titles, their ids, their sentences."""
    return {*restricted_names(), SECRET, "Checkout launch", "Vault Gateway incident", "vault-incident.md", "launch.md",
            "launch code"}


def leaked(text: str) -> set[str]:
    return {word for word in restricted_words() if word.lower() in text.lower()}


def test_a_caller_without_the_group_gets_nothing_derived_from_the_restricted_document(index):
    for mode in ("hybrid", "vector", "graph"):
        response = index.query(QUESTION, mode=mode, top_k=10)
        assert all(r.doc_id != "t:vault-incident.md" for r in response.results), mode
        assert all("vault" not in r.text.lower() for r in response.results)
        named = {n for r in response.results for n in r.entity_path}
        named |= {e.name for e in response.entities_mentioned}
        named |= {name for fact in response.relationships for name in (fact.source, fact.target)}
        assert not named & restricted_names(), mode
        assert all("t:vault-incident.md" not in fact.doc_ids for fact in response.relationships)
    for result in index.query("vault-gateway hsm-proxy signing key", mode="global", top_k=10).results:
        assert not set(result.entity_path) & restricted_names()
        assert "vault" not in result.text.lower()


def test_a_caller_with_the_group_gets_it(index):
    response = index.query(QUESTION, top_k=3, groups=["payments-oncall", "sre"])
    assert response.results[0].doc_id == "t:vault-incident.md"
    assert "Krzysztof Obrembski" in response.results[0].text
    assert {e.name for e in response.entities_mentioned} & restricted_names()
    # Public documents stay readable to everyone, with or without groups.
    assert index.query("Who owns payments-api?", top_k=3).results[0].doc_id == "t:payments.md"


def test_groups_must_be_a_collection(index):
    with pytest.raises(TypeError):
        index.query(QUESTION, groups="payments-oncall")


def test_reader_access_rules():
    access = ReaderAccess({"secret": frozenset({"a"}), "mixed": frozenset({"a", "b"})}, ["b"])
    assert access.can_read("public") and access.can_read("mixed") and not access.can_read("secret")
    assert access.can_read_any(["secret", "public"]) and not access.can_read_any(["secret"])
    assert access.can_read_all(["public", "mixed"]) and not access.can_read_all(["public", "secret"])


def test_an_answers_relationships_cut_in_favour_of_hidden_entities_are_read_again_among_the_visible(tmp_path):
    """The answer's subgraph lists the heaviest relationships among every entity it names; when those the reader may
    not see fill the limit, the reader still gets the relationships among the entities it sees."""
    from graphrag_pipeline.lib.core.models import Entity, Relationship
    from graphrag_pipeline.lib.stores.embedded_graph import EmbeddedGraphStore
    from graphrag_pipeline.query.engine import visible_subgraph

    def entity(entity_id: str, doc_id: str) -> Entity:
        return Entity(entity_id=entity_id, name=entity_id, canonical=entity_id, type="Service", description="",
                      mention_count=1, chunk_ids=("c",), doc_ids=(doc_id,))

    def relationship(source: str, target: str, weight: float) -> Relationship:
        return Relationship(relationship_id=f"{source}-{target}", source_id=source, target_id=target,
                            type="DEPENDS_ON", description="", weight=weight, chunk_ids=("c",), doc_ids=("public",))

    with EmbeddedGraphStore(tmp_path / "graph.sqlite") as graph:
        graph.upsert_entities([entity("a", "public"), entity("b", "public"), entity("vault", "secret")])
        graph.upsert_relationships([relationship("a", "vault", 9.0), relationship("b", "vault", 8.0),
                                    relationship("a", "b", 1.0)])
        subgraph = graph.answer_subgraph(["a", "b", "vault"], [], [], limit=2)
        public = ReaderAccess({"secret": frozenset({"security"})}, [])
        visible, among = visible_subgraph(graph, subgraph, public, limit=2)
        assert set(visible) == {"a", "b"} and [r.relationship_id for r in among] == ["a-b"]
        visible, among = visible_subgraph(graph, subgraph, ReaderAccess({}, []), limit=2)
        assert set(visible) == {"a", "b", "vault"} and [r.relationship_id for r in among] == ["a-vault", "b-vault"]


def test_an_answers_relationships_that_only_restricted_documents_state_make_room_for_readable_ones(tmp_path):
    """Entities a reader sees can be related in documents it may not read: those relationships are not its facts,
    and when they fill the cut, lighter readable ones take their places."""
    from graphrag_pipeline.lib.core.models import Entity, Relationship
    from graphrag_pipeline.lib.stores.embedded_graph import EmbeddedGraphStore
    from graphrag_pipeline.query.engine import visible_subgraph

    def relationship(source: str, target: str, weight: float, doc_id: str) -> Relationship:
        return Relationship(relationship_id=f"{source}-{target}", source_id=source, target_id=target,
                            type="DEPENDS_ON", description="", weight=weight, chunk_ids=("c",), doc_ids=(doc_id,))

    with EmbeddedGraphStore(tmp_path / "graph.sqlite") as graph:
        graph.upsert_entities([Entity(entity_id=e, name=e, canonical=e, type="Service", description="",
                                      mention_count=1, chunk_ids=("c",), doc_ids=("public",)) for e in "abcd"])
        graph.upsert_relationships([relationship("a", "b", 9.0, "secret"), relationship("a", "c", 8.0, "secret"),
                                    *(relationship(s, t, 7.0 - i, "secret") for i, (s, t) in enumerate(["ad", "bc"])),
                                    relationship("b", "d", 1.0, "public"), relationship("c", "d", 0.5, "public")])
        subgraph = graph.answer_subgraph(list("abcd"), [], [], limit=2)
        public = ReaderAccess({"secret": frozenset({"security"})}, [])
        visible, among = visible_subgraph(graph, subgraph, public, limit=2)
        assert set(visible) == set("abcd") and [r.relationship_id for r in among] == ["b-d", "c-d"]
        visible, among = visible_subgraph(graph, subgraph, ReaderAccess({}, []), limit=2)
        assert [r.relationship_id for r in among] == ["a-b", "a-c"]


def test_a_folders_configured_groups_restrict_its_files_and_changing_them_reingests(tmp_path):
    from graphrag_pipeline.lib.core.config import FolderSource
    from graphrag_pipeline.lib.sources.registry import read_source, scan_hashes

    (tmp_path / "runbook.md").write_text("# Runbook\n\nRestart vault-gateway.\n")
    (tmp_path / "own.md").write_text("---\naccess_groups: [security]\n---\n# Keys\n\nRotate the HSM keys.\n")
    open_folder = FolderSource(name="rb", path=str(tmp_path))
    closed_folder = FolderSource(name="rb", path=str(tmp_path), access_groups=("sre",))

    closed = {d.title: d for d in read_source(closed_folder).documents}
    assert closed["Runbook"].metadata["access_groups"] == ["sre"]
    # A file may narrow its folder's groups, never widen them: groups the folder does not grant leave it unindexed.
    assert "Keys" not in closed
    opened = {d.title: d for d in read_source(open_folder).documents}
    assert "access_groups" not in opened["Runbook"].metadata
    assert opened["Runbook"].content_hash != closed["Runbook"].content_hash
    for source in (open_folder, closed_folder):  # the sensor's cheap scan agrees with the read
        assert scan_hashes(source) == read_source(source).hashes


def _facts(response) -> set[tuple[str, str, str]]:
    return {(fact.source, fact.type, fact.target) for fact in response.relationships}


def test_a_relationship_only_a_restricted_document_states_is_no_fact_for_other_callers(index):
    """Caught mutation: dropping the relationship access filter in QueryEngine._respond (both ends are public)."""
    restricted_fact = ("checkout-service", "DEPENDS_ON", "ledger-db")
    assert restricted_fact in _facts(index.query(LAUNCH_QUESTION, top_k=5, groups=GROUPS))
    for mode in ("hybrid", "graph", "vector"):
        response = index.query(LAUNCH_QUESTION, mode=mode, top_k=5)
        assert restricted_fact not in _facts(response), mode
        assert all(fact.doc_ids for fact in response.relationships), mode


def test_an_entity_path_names_no_hop_only_a_restricted_document_makes(index):
    """The walk from ledger-db reaches checkout-service only through LAUNCH (a relationship, and its entry passage)."""
    question = "Which service does ledger-db serve?"

    def hops(response) -> set[tuple[str, str]]:
        return {hop for r in response.results for hop in zip(r.entity_path, r.entity_path[1:])}

    assert ("ledger-db", "checkout-service") in hops(index.query(question, mode="graph", top_k=5, groups=GROUPS,
                                                                 results="chunks"))
    for mode in ("graph", "hybrid"):
        response = index.query(question, mode=mode, top_k=5, results="chunks")
        assert ("ledger-db", "checkout-service") not in hops(response), mode
        assert all(r.hops_from_query == max(0, len(r.entity_path) - 1) for r in response.results)


def test_a_public_relationship_shows_other_callers_only_the_wording_public_documents_use(index):
    calls = ("checkout-service", "DEPENDS_ON", "payments-api")
    public = {tuple(f.predicates) for f in index.query(LAUNCH_QUESTION, top_k=5).relationships
              if (f.source, f.type, f.target) == calls}
    entitled = {tuple(f.predicates) for f in index.query(LAUNCH_QUESTION, top_k=5, groups=GROUPS).relationships
                if (f.source, f.type, f.target) == calls}
    assert entitled == {("calls", "depends on")}
    assert public == {("calls",)}


def test_a_summary_is_shown_only_to_callers_who_may_read_every_document_it_was_written_from(index):
    """Caught mutation: the summary rule "every document readable" turned into "any document readable" (the mixed
    community's summary is written from public documents and LAUNCH)."""
    summaries = index.state.payloads(COMMUNITY_SUMMARY_PAYLOADS)
    mixed = {cid for cid, s in summaries.items()
             if LAUNCH_DOC in s["written_from"] and "t:payments.md" in s["written_from"]}
    assert mixed, "the fixture must put LAUNCH in a community with public documents"
    question = "checkout-service payments-api ledger-db launch"
    entitled = index.query(question, mode="global", top_k=10, groups=GROUPS).results
    assert mixed & {r.chunk_id for r in entitled} and any(SECRET in r.text for r in entitled)
    for result in index.query(question, mode="global", top_k=10).results:
        assert result.chunk_id not in mixed
        assert not leaked(result.text), result.text


def test_exploring_the_graph_shows_only_what_readable_documents_say(index):
    public = explore.list_entities(index, limit=100)["entities"]
    by_name = {e["name"]: e for e in public}
    assert not leaked(json.dumps(public))
    assert by_name["checkout-service"]["description"] == "checkout-service calls payments-api to charge cards."
    assert by_name["checkout-service"]["documents"] == 1
    entitled = {e["name"]: e for e in explore.list_entities(index, groups=GROUPS, limit=100)["entities"]}
    assert SECRET in entitled["checkout-service"]["description"] and SECRET in entitled
    assert entitled.keys() > by_name.keys() >= {"payments-api", "ledger-db", "team-payments"}

    relationships = explore.list_relationships(index, limit=1000)["relationships"]
    assert not leaked(json.dumps(relationships))
    assert {(r["source"], r["target"]) for r in relationships} >= {("checkout-service", "payments-api")}
    assert ("checkout-service", "ledger-db") not in {(r["source"], r["target"]) for r in relationships}
    # Offsets count what the caller sees: the second page starts where the first ended.
    first, second = (explore.list_entities(index, offset=o, limit=3, order_by="name")["entities"] for o in (0, 3))
    six = explore.list_entities(index, limit=6, order_by="name")["entities"]
    assert [e["id"] for e in first + second] == [e["id"] for e in six] and len(six) == 6


def test_the_graph_command_takes_the_callers_groups(built, capsys):
    index_dir = built[0].settings().index_dir
    assert cli_main(["graph", "entities", "--index-dir", index_dir, "--limit", "100", "--json"]) == 0
    assert not leaked(capsys.readouterr().out)
    assert cli_main(["graph", "relationships", "--index-dir", index_dir, "--limit", "100", "--json"]) == 0
    assert not leaked(capsys.readouterr().out)
    assert cli_main(["graph", "entities", "--index-dir", index_dir, "--limit", "100", "--json",
                     "--group", "payments-oncall"]) == 0
    assert SECRET in capsys.readouterr().out


def _shown(metadata: dict) -> str:
    return json.dumps({key: str(value.value) for key, value in metadata.items()})


def test_run_metadata_names_no_restricted_entity_title_document_or_text(built):
    resource, metadata = built
    materialized = {asset: "\n".join(_shown(m) for m in runs) for asset, runs in metadata.items()}
    for asset, text in materialized.items():
        assert not leaked(text), asset
    checks = [*graph_integrity(build_asset_check_context(), graphrag=resource)] + [
        check(graphrag=resource) for check in (every_chunk_has_a_published_vector, quarantine_below_threshold,
                                               every_entity_has_a_published_vector, communities_cover_the_graph,
                                               every_summary_has_a_published_vector)]
    for result in checks:
        assert result.passed and not leaked(f"{result.description} {_shown(result.metadata)}"), result
    # Public elements, titles and documents are still named: the filter withholds, it does not blank.
    assert "team-payments" in materialized["element_summaries"]
    assert "t:payments.md" in materialized["raw_documents"] and "withheld" in materialized["raw_documents"]


def test_a_deleted_restricted_document_is_hidden_from_everyone_from_the_moment_it_is_deleted(tmp_path):
    """Only raw_documents has run since the restricted files went (a crash right after it, or the Dagster runs in
    between): what the later stages derived from them is still in the index, and nobody sees it — not the public,
    not the group (the documents are gone). The full build that follows leaves no withdrawn mark behind."""
    from graphrag_pipeline.lib.compose.workspace import Workspace
    from graphrag_pipeline.lib.core.config import load_settings
    from graphrag_pipeline.lib.stages import all_shards, stage
    from graphrag_pipeline.lib.stores.state.sql import WITHDRAWN_GROUP
    from graphrag_pipeline_tests.conftest import build

    corpus, config = write_access_config(tmp_path)
    settings = load_settings(config)
    build(settings)
    (corpus / "vault-incident.md").unlink()
    (corpus / "launch.md").unlink()
    with Workspace(settings) as workspace:
        stage("raw_documents").execute(workspace, all_shards(workspace))
        assert workspace.graph_store.get_entities(workspace.graph_store.all_entity_ids())  # the derived rows are still there
    with open_index(settings=settings) as index:
        assert any("vault-gateway" == e.name for e in index.graph.get_entities(index.graph.all_entity_ids()).values())
        for groups in ((), GROUPS):
            seen = []
            for question in (QUESTION, LAUNCH_QUESTION, "What does vault-gateway depend on?"):
                for mode in ("hybrid", "graph", "vector", "keyword", "global"):
                    answer = index.query(question, mode=mode, results="chunks", top_k=20, groups=groups).to_dict()
                    answer.pop("question")
                    seen.append(json.dumps(answer))
            seen.append(json.dumps(explore.list_entities(index, groups=groups, limit=1000)))
            seen.append(json.dumps(explore.list_relationships(index, groups=groups, limit=1000)))
            seen.append(json.dumps(explore.graph_stats(index, groups=groups)))
            seen.append(json.dumps(index.context("checkout-service", groups=groups).to_dict()))
            assert leaked("\n".join(seen)) == set(), groups
    build(settings)
    with Workspace(settings) as workspace:
        assert not any(WITHDRAWN_GROUP in groups for groups in workspace.state.restricted_documents().values())
        assert not any(e.name == "vault-gateway"
                       for e in workspace.graph_store.get_entities(workspace.graph_store.all_entity_ids()).values())


def test_a_callers_ranking_is_the_ranking_of_an_index_without_the_documents_it_may_not_read(tmp_path):
    """LAUNCH alone says checkout-service depends on ledger-db, and only the vault page names vault-gateway: for a
    caller without the group, no signal may come from them, in any mode. The control index is built without the
    restricted files; the order of the results and which of them have a graph or relation signal must agree."""
    from graphrag_pipeline.lib.core.config import load_settings
    from graphrag_pipeline_tests.conftest import build

    _, config = write_access_config(tmp_path / "all")
    control_corpus, control_config = write_access_config(tmp_path / "public")
    (control_corpus / "vault-incident.md").unlink()
    (control_corpus / "launch.md").unlink()
    build(load_settings(config))
    build(load_settings(control_config))
    questions = (QUESTION, LAUNCH_QUESTION, "What does checkout-service call?", "What does vault-gateway depend on?",
                 "What does ledger-db serve?")

    def shape(response):
        return [(r.doc_id.split(":", 1)[1], r.scores["graph"] > 0, r.scores["relation"] > 0) for r in response.results]

    with open_index(config_path=config) as index, open_index(config_path=control_config) as control:
        for question in questions:
            for mode in ("hybrid", "graph", "vector", "keyword"):
                public = index.query(question, mode=mode, results="chunks", top_k=10)
                expected = control.query(question, mode=mode, results="chunks", top_k=10)
                assert shape(public) == shape(expected), (question, mode)


def test_a_deleted_documents_text_is_not_left_in_the_sqlite_files(tmp_path):
    """`strings state.sqlite` found a deleted restricted document's sentences in free pages; now they are
    overwritten (SQLite's secure_delete), in the state and in the embedded graph."""
    from graphrag_pipeline.lib.core.config import load_settings
    from graphrag_pipeline_tests.conftest import build

    corpus, config = write_access_config(tmp_path)
    settings = load_settings(config)
    build(settings)
    index = Path(settings.index_dir)
    assert SECRET.encode() in b"".join(path.read_bytes() for path in index.glob("state.sqlite*"))
    (corpus / "launch.md").unlink()
    build(settings)
    for name in ("state.sqlite", "graph.sqlite"):
        stored = b"".join(path.read_bytes() for path in index.glob(f"{name}*"))
        assert SECRET.encode() not in stored and b"launch code" not in stored, name


def test_a_deleted_documents_payload_is_not_left_in_the_published_vector_segments(tmp_path):
    """`strings` found a deleted restricted document's id in the published vector segments: Qdrant Edge
    marks a deleted point and leaves its payload (the document id) in the segment until an optimizer merges it. A publish after a
    delete writes the collection anew from its live points."""
    from graphrag_pipeline.lib.core.config import load_settings
    from graphrag_pipeline_tests.conftest import build

    def published_bytes() -> bytes:
        return b"".join(path.read_bytes() for path in (index / "vectors" / "published").rglob("*") if path.is_file())

    corpus, config = write_access_config(tmp_path)
    settings = load_settings(config)
    build(settings)
    index = Path(settings.index_dir)
    assert LAUNCH_DOC.encode() in published_bytes()
    (corpus / "launch.md").unlink()
    build(settings)
    assert LAUNCH_DOC.encode() not in published_bytes()
    assert not list((index / "vectors" / "collections").rglob("deleted-since-publish"))



def test_the_embedding_cache_forgets_the_vectors_of_deleted_and_edited_passages(tmp_path):
    """The cache kept the vector of every text it was ever given, a deleted restricted passage's too. After chunks
    go, the last corpus-wide stage cuts it back to the current chunks' texts; a build that removed none leaves it."""
    from graphrag_pipeline.lib.core.config import load_settings
    from graphrag_pipeline.lib.stores.state.sql import CHUNKS_REMOVED_MARK
    from graphrag_pipeline.lib.stores.state.sqlite import SQLiteStateStore
    from graphrag_pipeline_tests.conftest import build

    corpus, config = write_access_config(tmp_path)
    settings = load_settings(config)
    build(settings)

    def cached_hashes() -> set[str]:
        state = SQLiteStateStore(Path(settings.index_dir) / "state.sqlite")
        try:
            assert state.stage_mark(CHUNKS_REMOVED_MARK) is None  # every build ends with the cache cut back
            return {h for (h,) in state.query("SELECT text_hash FROM embedding_cache")}
        finally:
            state.close()

    first = cached_hashes()
    (corpus / "launch.md").unlink()
    (corpus / "checkout.md").write_text(PUBLIC["checkout.md"] + "\ncheckout-service retries twice.\n")
    build(settings)
    second = cached_hashes()
    gone, added = first - second, second - first
    assert len(gone) == 2 and len(added) == 1  # launch's passage and checkout's old one; checkout's new one
    build(settings)
    assert cached_hashes() == second