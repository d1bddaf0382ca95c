"""Global mode on the sample corpus: a broad question about one subsystem reaches that subsystem's communities, and
community titles are led by typed entities rather than by generic ones."""

from collections import Counter

import pytest

from graphrag_pipeline.lib.stages.community_summaries import generic_entity_types
from graphrag_pipeline.lib.stores.state.sql import COMMUNITY_PAYLOADS, COMMUNITY_SUMMARY_PAYLOADS
from graphrag_pipeline.query import open_index

pytestmark = pytest.mark.slow

TOP_COMMUNITIES = 5
# Broad questions, each about one folder of data/corpus.
BROAD_QUESTIONS = {
    "otel-demo": "What services make up the OpenTelemetry demo and how do they call each other?",
    "prometheus-runbooks": "Which Kubernetes alerts do the runbooks cover and how do I respond to them?",
    "online-boutique": "How is the Online Boutique shop deployed and which microservices does it have?",
}


@pytest.fixture(scope="module")
def engine(sample_settings):
    with open_index(settings=sample_settings) as index:
        yield index


def folder(doc_id: str) -> str:
    """The corpus folder a document comes from: doc ids are ``<source>:<path inside data/corpus>``; a page of the
    sample catalog (``sample-catalog:<kind>:<namespace>/<name>``) belongs to its system's folder: Online Boutique's
    entities have their own namespace, the OpenTelemetry demo's the default one."""
    source, _, rest = doc_id.partition(":")
    if source == "sample-catalog":
        return "online-boutique" if rest.split(":", 1)[1].startswith("online-boutique/") else "otel-demo"
    return rest.split("/", 1)[0]


def member_folders(engine, community_id: str) -> Counter:
    """How many of the community's members' documents lie in each folder."""
    members = engine.state.payloads(COMMUNITY_PAYLOADS, [community_id])[community_id]["entity_ids"]
    entities = engine.state.element_payloads("entity", members)
    return Counter(folder(doc) for entity in entities.values() for doc in entity["doc_ids"])


@pytest.mark.parametrize("subsystem", sorted(BROAD_QUESTIONS))
def test_a_broad_question_returns_the_communities_of_its_subsystem(engine, subsystem):
    results = engine.query(BROAD_QUESTIONS[subsystem], mode="global", top_k=TOP_COMMUNITIES).results

    assert len(results) == TOP_COMMUNITIES
    assert all(result.source["kind"] == "community" for result in results)
    # Each community is mostly written from the subsystem's documents ...
    for result in results:
        assert member_folders(engine, result.chunk_id).most_common(1)[0][0] == subsystem, result.source["title"]
    # ... and what it cites is mostly the subsystem too.
    cited = [folder(citation.doc_id) for result in results for citation in result.citations]
    assert cited and cited.count(subsystem) / len(cited) >= 0.75, Counter(cited)


def test_titles_are_led_by_typed_members_whenever_a_community_has_some(engine, sample_settings):
    generic = generic_entity_types(sample_settings)
    assert {"CONCEPT", "PERSON", "LOCATION"} <= generic
    summaries = engine.state.payloads(COMMUNITY_SUMMARY_PAYLOADS)
    communities = engine.state.payloads(COMMUNITY_PAYLOADS, summaries)
    entities = engine.state.element_payloads("entity")
    led_by_typed = 0
    for community_id, summary in summaries.items():
        members = [entities[entity_id] for entity_id in communities[community_id]["entity_ids"]]
        typed = [member for member in members if member["type"] not in generic]
        if not typed:
            continue
        # Titles read "<Types>: <first name>, ...": the first name must be one of the typed members.
        heading, _, names = summary["title"].partition(": ")
        assert heading not in {"Concepts", "Persons", "Locations"}, summary["title"]
        assert any(names.startswith(member["name"]) for member in typed), summary["title"]
        led_by_typed += 1
    assert led_by_typed >= len(summaries) / 2  # the corpus is mostly typed: the check above ran on most titles
