from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.core.config import ExtractionConfig, PipelineSettings, default_config_data
from graphrag_pipeline.lib.core.models import Chunk, ChunkExtraction
from graphrag_pipeline.lib.extract import offline as extraction_module
from graphrag_pipeline.lib.extract.offline import (
    COOCCURRENCE_PREDICATE,
    TITLE_PREDICATE,
    OfflineExtractor,
    _clean_bounds,
    _DictionarySpotter,
    _equal_parts,
    _resolve_overlaps,
    _Span,
    available_cores,
    precomputed_extractions,
)

MUSIQUE_TITLE = "Journal of Mathematical Physics"
MUSIQUE_TEXT = (
    "The Journal of Mathematical Physics is a peer-reviewed journal published monthly by the American Institute of "
    "Physics devoted to the publication of papers in mathematical physics. The journal was first published bimonthly "
    "beginning in January 1960; it became a monthly publication in 1963. The current editor is Jan Philip Solovej "
    "from University of Copenhagen. Its 2018 Impact Factor is 1.355"
)


def settings(**extraction: object) -> PipelineSettings:
    return PipelineSettings.model_validate(default_config_data()).with_overrides(extraction=extraction)


def make_extractor(known_names: dict[str, str] | None = None, **extraction: object) -> OfflineExtractor:
    configured = settings(**extraction)
    return OfflineExtractor(configured.extraction, configured.ontology, known_names=known_names)


def chunk(text: str, doc_id: str = "doc-1", position: int = 0) -> Chunk:
    return Chunk(f"{doc_id}-chunk-{position}", doc_id, position, text, len(text.split()), 0, len(text))


def extract_one(extractor: OfflineExtractor, text: str, title: str | None = None) -> ChunkExtraction:
    item = chunk(text)
    [result] = extractor.extract([item], {item.doc_id: title} if title else None)
    return result


def entity_types(result: ChunkExtraction) -> dict[str, str]:
    return {entity.name: entity.type for entity in result.entities}


def relation_triples(result: ChunkExtraction) -> set[tuple[str, str, str]]:
    return {(relation.source, relation.type, relation.target) for relation in result.relations}


@pytest.fixture(scope="module")
def extractor() -> OfflineExtractor:
    """Default configuration without titles; spaCy itself is cached per process by the extraction module."""
    return make_extractor(title_entity_type=None)


# --- pure helpers: no spaCy -------------------------------------------------------------------------------------


def test_overlaps_prefer_spotter_priority_then_length() -> None:
    candidates = [
        _Span(0, 14, "Kubernetes API", "kubernetes api", "TECHNOLOGY", "ner"),
        _Span(0, 10, "Kubernetes", "kubernetes", "TECHNOLOGY", "dictionary"),
        _Span(20, 35, "payments-api-v2", "payments-api-v2", "Service", "pattern"),
        _Span(20, 32, "payments-api", "payments-api", "Service", "pattern"),
        _Span(30, 40, "api server", "api server", "CONCEPT", "ner"),
        _Span(41, 47, "London", "london", "LOCATION", "ner"),
    ]

    resolved = _resolve_overlaps(candidates)

    assert [span.name for span in resolved] == ["Kubernetes", "payments-api-v2", "London"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("the Kubernetes API", "Kubernetes API"),
        ("The Beatles's", "Beatles"),
        ("`payments-api`.", "payments-api"),
        ("Carl Rogers\u2019s", "Carl Rogers"),
        ("A", "A"),  # a lone determiner-like word is a name, not a determiner
        ('"..."', None),
    ],
)
def test_clean_bounds_strips_determiners_possessives_and_punctuation(text: str, expected: str | None) -> None:
    bounds = _clean_bounds(text, 0, len(text))

    assert (text[bounds[0] : bounds[1]] if bounds else None) == expected


def test_dictionary_spotter_handles_thousands_of_names_and_prefers_the_longest() -> None:
    names = {f"component{index:05d}": "TECHNOLOGY" for index in range(5000)}
    names.update({"Kafka": "TECHNOLOGY", "Kafka Streams": "TECHNOLOGY", "Online Boutique": "CONCEPT"})
    spotter = _DictionarySpotter(names)
    text = "COMPONENT04242 feeds kafka  streams; kafka-service and component4242x are not names. Online\nBoutique."

    found = [(text[start:end], surface) for start, end, surface, _ in spotter.find(text)]

    assert found == [
        ("COMPONENT04242", "component04242"),
        ("kafka  streams", "Kafka Streams"),
        ("Online\nBoutique", "Online Boutique"),
    ]


def test_precomputed_attaches_entities_and_triples_and_quarantines_malformed_items() -> None:
    ontology = settings().ontology
    chunks = [
        chunk("The checkout-service calls payments-api.", doc_id="doc-a", position=0),
        chunk("The payments-api is owned by team-payments. Person - centered therapy.", doc_id="doc-a", position=1),
        chunk("Unrelated text.", doc_id="doc-b", position=0),
        chunk("No record for this document.", doc_id="doc-c", position=0),
    ]
    records = {
        "doc-a": {
            "id": "doc-a",
            "entities": ["payments-api", "Person-centered therapy", "Grafana", 42],
            "triples": [
                ["payments-api", "owned by", "team-payments"],
                ["checkout-service", "published by", "Grafana"],
                ["payments-api", "owned by"],
                ["payments-api", None, "x"],
            ],
        },
        "doc-b": {"id": "doc-b", "entities": "not a list"},
    }

    result = precomputed_extractions(chunks, records, ontology)

    first, second, unrelated, unrecorded = result.extractions
    assert [e.chunk_id for e in result.extractions] == [c.chunk_id for c in chunks]
    assert {e.name for e in first.entities} == {"payments-api", "Grafana", "checkout-service"}  # Grafana: nowhere
    assert {e.name for e in second.entities} == {"payments-api", "Person-centered therapy", "team-payments"}
    assert {e.type for e in first.entities + second.entities} == {ontology.default_entity_type}
    assert {e.spotter for e in first.entities} == {"precomputed"}
    assert relation_triples(second) == {("payments-api", "OWNED_BY", "team-payments")}
    [fallback] = first.relations
    assert (fallback.source, fallback.type, fallback.target, fallback.predicate) == (
        "checkout-service",
        "RELATED_TO",
        "Grafana",
        "published by",
    )
    assert unrelated.entities == () and unrecorded.entities == () and unrecorded.relations == ()
    assert sorted((q.item_id, q.reason) for q in result.quarantined) == [
        ("doc-a", "entity is not a non-empty string"),
        ("doc-a", "triple is not a list of three non-empty strings"),
        ("doc-a", "triple is not a list of three non-empty strings"),
        ("doc-b", "record lacks a list of entities and triples"),
    ]
    assert {q.stage for q in result.quarantined} == {"extraction"}
    assert json.loads(result.quarantined[-1].raw) == records["doc-b"]


@pytest.mark.parametrize(
    ("label", "name", "expected"),
    [
        ("ORG", "CPU", "CONCEPT"),  # acronyms: the shape does not say what kind of thing, never a company
        ("PERSON", "NAMESPACE", "CONCEPT"),
        ("GPE", "the HPAs", "CONCEPT"),
        ("ORG", "KubePodCrashLooping", "TECHNOLOGY"),  # code-like: the software label's type
        ("PERSON", "payments-api", "TECHNOLOGY"),
        ("ORG", "node_exporter", "TECHNOLOGY"),
        ("LOC", "k8s", "TECHNOLOGY"),
        ("ORG", "kubelet Service", "TECHNOLOGY"),
        ("ORG", "University of Copenhagen", "ORGANIZATION"),  # prose names keep NER's label
        ("PERSON", "Morgan McLean", "PERSON"),
        ("ORG", "Hewlett-Packard", "ORGANIZATION"),
        ("PRODUCT", "CPU", "TECHNOLOGY"),  # only person, organization and place labels are second-guessed
    ],
)
def test_technical_names_are_not_people_organizations_or_places(label: str, name: str, expected: str) -> None:
    assert make_extractor()._ner_type(label, name) == expected


def test_a_proper_noun_label_on_words_the_chunk_writes_in_lower_case_is_no_entity() -> None:
    """"Alert" and "CLUSTER NAMESPACE", capitalized by a heading or a template beside the chunk's own "alert",
    "cluster" and "namespace", are common nouns; "Paris", never written "paris", stays a place, and so does a name of
    title-cased words ("Mathematical Physics Institute") whatever the chunk writes its words as."""
    text = ("Alert: CLUSTER NAMESPACE down. The alert fires when the cluster in a namespace is down, says the "
            "Mathematical Physics Institute in Paris, about mathematical physics.")
    spans = [(text.index(word), text.index(word) + len(word), label)
             for word, label in [("Alert", "PERSON"), ("CLUSTER NAMESPACE", "ORG"), ("Paris", "GPE"),
                                 ("Mathematical Physics Institute", "ORG")]]
    found = {(span.name, span.type) for span in make_extractor()._candidate_spans(text, spans)}
    assert found == {("Paris", "LOCATION"), ("Mathematical Physics Institute", "ORGANIZATION")}


# --- spaCy-backed extraction ------------------------------------------------------------------------------------


def typed_triples(result: ChunkExtraction) -> set[tuple[str, str, str]]:
    return {triple for triple in relation_triples(result) if triple[1] != "RELATED_TO"}


@pytest.mark.slow
def test_a_relation_phrase_relates_its_subject_to_every_object_listed_after_it(extractor: OfflineExtractor) -> None:
    result = extract_one(extractor, "The checkout-service depends on payments-api, cartservice and the ad-service.")

    assert typed_triples(result) == {
        ("checkout-service", "DEPENDS_ON", "payments-api"),
        ("checkout-service", "DEPENDS_ON", "cartservice"),
        ("checkout-service", "DEPENDS_ON", "ad-service"),
    }
    # The objects are only listed together: they co-occur, weaker than the stated relations.
    listed = [r for r in result.relations if r.type == "RELATED_TO"]
    assert {frozenset((r.source, r.target)) for r in listed} == {
        frozenset(pair) for pair in [("payments-api", "cartservice"), ("payments-api", "ad-service"),
                                     ("cartservice", "ad-service")]
    }
    assert all(r.weight < 1.0 for r in listed)


@pytest.mark.slow
def test_relative_and_passive_clauses_find_their_own_subjects(extractor: OfflineExtractor) -> None:
    text = "The frontend-proxy calls checkout-service, which is used by cartservice and ad-service."

    result = extract_one(extractor, text)

    assert typed_triples(result) == {
        ("frontend-proxy", "DEPENDS_ON", "checkout-service"),
        ("cartservice", "DEPENDS_ON", "checkout-service"),
        ("ad-service", "DEPENDS_ON", "checkout-service"),
    }
    assert {r.predicate for r in result.relations if r.type == "DEPENDS_ON"} == {"calls", "is used by"}


@pytest.mark.slow
def test_objects_end_at_the_clause_and_negated_or_distant_statements_stay_untyped(
    extractor: OfflineExtractor,
) -> None:
    text = (
        "The checkout-service uses payments-api to reach ledger-db; cartservice retries ad-service. "
        "The quote-service no longer calls email-service. "
        "The shipping-service owner, not the team, uses ad-service. "
        "The fraud-service reports errors when it calls the payments-api."
    )

    result = extract_one(extractor, text)

    assert typed_triples(result) == {("checkout-service", "DEPENDS_ON", "payments-api")}
    related = {frozenset((r.source, r.target)) for r in result.relations}
    assert frozenset(("quote-service", "email-service")) in related  # still co-occurring, just not typed


@pytest.mark.slow
def test_a_clause_referring_to_the_document_makes_its_title_the_subject() -> None:
    titled = make_extractor()
    text = (
        "It uses Redis and Kafka. The service also calls payments-api. When Envoy restarts: it calls Helm. "
        "The user calls checkout-service. Then it is not required by ad-service."
    )

    result = extract_one(titled, text, title="Cart Service")

    assert typed_triples(result) == {
        ("Cart Service", "DEPENDS_ON", "Redis"),
        ("Cart Service", "DEPENDS_ON", "Kafka"),
        ("Cart Service", "DEPENDS_ON", "payments-api"),
        ("Cart Service", "DEPENDS_ON", "Helm"),  # a clause after punctuation refers to the title on its own
    }
    # Entities the title is not stated to depend on are still related to it, by the weaker "mentions".
    mentioned = {r.target for r in result.relations if r.predicate == TITLE_PREDICATE}
    assert mentioned == {"Envoy", "checkout-service", "ad-service"}


@pytest.mark.slow
def test_relation_words_inside_a_name_are_part_of_the_name() -> None:
    with_dashboard = make_extractor(title_entity_type=None, known_names={"calls dashboard": "FEATURE"})

    result = extract_one(with_dashboard, "The checkout-service calls dashboard shows payments-api.")

    assert entity_types(result)["calls dashboard"] == "FEATURE"
    assert typed_triples(result) == set()


@pytest.mark.slow
def test_known_names_are_spotted_with_their_type_over_ner_and_under_the_configured_dictionary() -> None:
    known = {"Morgan McLean": "Team", "ledger": "Service", "Kafka": "Team"}
    with_catalog = make_extractor(title_entity_type=None, known_names=known)
    text = "Morgan McLean owns the ledger, which writes to Kafka."

    result = extract_one(with_catalog, text)
    plain_types = entity_types(extract_one(make_extractor(title_entity_type=None), text))

    assert plain_types["Morgan McLean"] in {"PERSON", "ORGANIZATION"} and "ledger" not in plain_types
    types = entity_types(result)
    assert types["Morgan McLean"] == "Team"  # beats NER's label
    assert types["ledger"] == "Service"  # lower-case: NER never proposes it
    assert types["Kafka"] == "TECHNOLOGY"  # the configured dictionary wins over the caller's names
    assert typed_triples(result) == {("ledger", "OWNED_BY", "Morgan McLean"), ("ledger", "DEPENDS_ON", "Kafka")}


@pytest.mark.slow
def test_ner_acronyms_and_code_names_are_retyped_in_extraction(extractor: OfflineExtractor) -> None:
    # spaCy's small model labels all four acronyms ORG and "Restart KubeProxy" ORG.
    text = "Scale the HPA when the CPU is saturated and the API returns errors in NAMESPACE. Restart KubeProxy now."

    types = entity_types(extract_one(extractor, text))

    assert {name: types.get(name) for name in ("HPA", "CPU", "API", "NAMESPACE")} == dict.fromkeys(
        ("HPA", "CPU", "API", "NAMESPACE"), "CONCEPT"
    )
    assert "ORGANIZATION" not in types.values()


@pytest.mark.slow
def test_runbook_sentence_yields_services_team_and_directed_relations(extractor: OfflineExtractor) -> None:
    result = extract_one(extractor, "The checkout-service depends on payments-api, which is owned by team-payments.")

    assert entity_types(result) == {"checkout-service": "Service", "payments-api": "Service", "team-payments": "Team"}
    typed = {r for r in relation_triples(result) if r[1] != "RELATED_TO"}
    assert typed == {("checkout-service", "DEPENDS_ON", "payments-api"), ("payments-api", "OWNED_BY", "team-payments")}
    # team-payments is in the relative clause about payments-api, not an object of "depends on": it only co-occurs.
    [distant] = [r for r in result.relations if r.type == "RELATED_TO"]
    assert {distant.source, distant.target} == {"checkout-service", "team-payments"}
    assert distant.predicate == COOCCURRENCE_PREDICATE and distant.weight < 1.0
    assert {r.predicate for r in result.relations if r.type != "RELATED_TO"} == {"depends on", "owned by"}
    assert all(r.description.startswith("The checkout-service depends on") for r in result.relations)
    assert all(e.chunk_id == "doc-1-chunk-0" for e in result.entities)


@pytest.mark.slow
def test_reverse_relation_patterns_swap_source_and_target(extractor: OfflineExtractor) -> None:
    result = extract_one(extractor, "team-payments owns payments-api. The payments-api is used by cartservice.")

    assert relation_triples(result) >= {
        ("payments-api", "OWNED_BY", "team-payments"),
        ("cartservice", "DEPENDS_ON", "payments-api"),
    }


@pytest.mark.slow
def test_aliases_canonicalize_to_one_entity(extractor: OfflineExtractor) -> None:
    aliased = make_extractor(title_entity_type=None, aliases={"K8s": "Kubernetes"})

    result = extract_one(aliased, "K8s restarts the pod. Kubernetes then reschedules it, and k8s logs the event.")

    assert [(e.name, e.type) for e in result.entities if e.name.lower() in {"k8s", "kubernetes"}] == [
        ("Kubernetes", "TECHNOLOGY")
    ]
    assert result.entities[0].description == "K8s restarts the pod."


@pytest.mark.slow
def test_dictionary_beats_overlapping_pattern_and_matches_case_insensitively() -> None:
    release = {"type": "Release", "regex": r"Kafka \d+\.\d+"}
    with_release = make_extractor(title_entity_type=None, patterns=[release])

    result = extract_one(with_release, "We upgraded KAFKA 3.7 and the redis-service after the incident.")

    types = entity_types(result)
    assert types["Kafka"] == "TECHNOLOGY"  # the configured spelling, not the text's
    assert not any(name.startswith("Kafka 3") or name.lower() == "redis" for name in types)


@pytest.mark.slow
def test_determiners_and_possessives_are_stripped_from_names() -> None:
    possessive = {"type": "Service", "regex": r"(?:the )?payments-api(?:'s)?"}
    with_possessive = make_extractor(title_entity_type=None, patterns=[possessive])

    result = extract_one(with_possessive, "We restarted the payments-api's pods twice.")

    assert entity_types(result)["payments-api"] == "Service"


@pytest.mark.slow
def test_ner_labels_map_to_ontology_types_and_numeric_labels_are_dropped(extractor: OfflineExtractor) -> None:
    result = extract_one(extractor, MUSIQUE_TEXT)

    types = entity_types(result)
    assert types["Jan Philip Solovej"] == "PERSON"
    assert types["University of Copenhagen"] == "ORGANIZATION"
    assert not {"1960", "January 1960", "1963", "1.355", "monthly"} & set(types)
    assert all(any(char.isalpha() for char in name) for name in types)
    assert "Journal of Mathematical Physics" in types  # "The" stripped from the NER span
    solovej = next(e for e in result.entities if e.name == "Jan Philip Solovej")
    assert solovej.description == "The current editor is Jan Philip Solovej from University of Copenhagen."


@pytest.mark.slow
def test_unmapped_ner_labels_get_the_default_type_and_null_labels_are_dropped() -> None:
    configured = settings()
    labels = {"PERSON": "PERSON", "DATE": None, "CARDINAL": None}
    minimal = OfflineExtractor(ExtractionConfig(ner_labels=labels, title_entity_type=None), configured.ontology)

    result = extract_one(minimal, "Jan Philip Solovej joined the University of Copenhagen in January 1960.")

    types = entity_types(result)
    assert types["Jan Philip Solovej"] == "PERSON"
    assert types["University of Copenhagen"] == configured.ontology.default_entity_type
    assert "January 1960" not in types


@pytest.mark.slow
def test_a_titles_qualifier_in_parentheses_is_not_part_of_the_name_it_gives() -> None:
    """"Robert Young (musician)" became an entity named "Robert Young (musician" (the closing parenthesis taken for
    edge punctuation) that the text's "Robert Young" never met."""
    text = "Robert Young was a Scottish guitarist. Robert Young played with Primal Scream."
    result = extract_one(make_extractor(), text, title="Robert Young (musician)")
    names = [e.name for e in result.entities]
    assert names.count("Robert Young") == 1 and not any("(" in name for name in names)
    assert result.entities[0].spotter == "title"


def test_title_is_an_entity_that_mentions_everything_in_the_chunk() -> None:
    titled = make_extractor()

    result = extract_one(titled, MUSIQUE_TEXT, title=MUSIQUE_TITLE)

    title = result.entities[0]
    assert (title.name, title.spotter) == (MUSIQUE_TITLE, "title")
    assert title.type == "ORGANIZATION"  # NER's type is more specific than the configured CONCEPT
    assert [e.name for e in result.entities].count(MUSIQUE_TITLE) == 1
    others = {e.name for e in result.entities} - {MUSIQUE_TITLE}
    with_title = [r for r in result.relations if MUSIQUE_TITLE in (r.source, r.target)]
    linked = {r.target if r.source == MUSIQUE_TITLE else r.source for r in with_title}
    assert others and linked == others
    mentions = [r for r in result.relations if r.predicate == TITLE_PREDICATE]
    assert mentions and all(r.source == MUSIQUE_TITLE and r.weight == 0.5 and r.type == "RELATED_TO" for r in mentions)
    solovej = next(r for r in mentions if r.target == "Jan Philip Solovej")
    assert solovej.description.startswith("The current editor is")


@pytest.mark.slow
def test_title_absent_from_text_keeps_the_configured_type_and_first_sentence() -> None:
    titled = make_extractor()

    text = "The checkout-service depends on payments-api. It retries twice."

    result = extract_one(titled, text, title="Checkout flow")

    title = result.entities[0]
    assert (title.name, title.type, title.spotter) == ("Checkout flow", "CONCEPT", "title")
    assert title.description == "The checkout-service depends on payments-api."
    assert {(r.target, r.predicate) for r in result.relations if r.source == "Checkout flow"} == {
        ("checkout-service", TITLE_PREDICATE),
        ("payments-api", TITLE_PREDICATE),
    }


@pytest.mark.slow
def test_cooccurrence_cap_relates_only_neighbours_in_long_lists() -> None:
    text = "Kafka, Redis, Envoy, Docker and Helm run on every node."
    capped = make_extractor(title_entity_type=None, max_entities_per_sentence=3)
    uncapped = make_extractor(title_entity_type=None, max_entities_per_sentence=12)

    capped_pairs = {frozenset((r.source, r.target)) for r in extract_one(capped, text).relations}
    uncapped_pairs = {frozenset((r.source, r.target)) for r in extract_one(uncapped, text).relations}

    names = ["Kafka", "Redis", "Envoy", "Docker", "Helm"]
    assert capped_pairs == {frozenset(pair) for pair in zip(names, names[1:])}
    assert len(uncapped_pairs) == 10
    weights = {frozenset((r.source, r.target)): r.weight for r in extract_one(uncapped, text).relations}
    assert weights[frozenset(("Kafka", "Redis"))] > weights[frozenset(("Kafka", "Helm"))]


@pytest.mark.slow
def test_markdown_list_items_are_separate_sentences(extractor: OfflineExtractor) -> None:
    text = "## Services\n\n- checkout-service handles orders\n- payments-api charges cards\n"

    result = extract_one(extractor, text)

    assert {e.name for e in result.entities} >= {"checkout-service", "payments-api"}
    assert result.relations == ()


@pytest.mark.slow
def test_markdown_links_and_html_do_not_leak_into_names(extractor: OfflineExtractor) -> None:
    text = (
        '<p align="center"><img src="logo.svg" width="300"></p>\n\n'
        "Online Boutique uses [Cloud Operations](https://cloud.google.com/products/operations) and "
        "[Memorystore](https://cloud.google.com/memorystore) on Google Cloud, see https://example.com/docs."
    )

    result = extract_one(extractor, text)

    names = {e.name for e in result.entities}
    assert names and not any(marker in name for name in names for marker in ("http", "](", "<", "=", "width"))
    assert all("https://" not in r.description for r in result.relations)


@pytest.mark.slow
def test_empty_blank_and_huge_chunks_do_not_crash(extractor: OfflineExtractor) -> None:
    sentence = "The checkout-service depends on payments-api. "
    huge = sentence * 1200  # ~55k characters: several spaCy segments
    chunks = [chunk("", position=0), chunk("   \n\t", position=1), chunk(huge, position=2), chunk("", position=3)]

    results = extractor.extract(chunks)

    assert [r.chunk_id for r in results] == [c.chunk_id for c in chunks]
    for empty in (results[0], results[1], results[3]):
        assert empty.entities == () and empty.relations == ()
    assert relation_triples(results[2]) == {("checkout-service", "DEPENDS_ON", "payments-api")}
    assert extractor.extract([]) == []


def test_hybrid_keeps_the_users_vocabulary_types_and_adds_what_only_the_model_found() -> None:
    from graphrag_pipeline.lib.compose.workspace import combine_extractions
    from graphrag_pipeline.lib.core.models import EntityMention, RelationMention

    spotted = ChunkExtraction("c1", (
        EntityMention("payments-api", "Service", spotter="pattern"),
        EntityMention("Acme", "ORGANIZATION", spotter="ner"),
    ), (RelationMention("payments-api", "Acme", "RELATED_TO"),))
    by_model = ChunkExtraction("c1", (
        EntityMention("Payments-API", "TECHNOLOGY", "Takes card payments.", spotter="llm"),
        EntityMention("ACME", "Team", "Owns payments.", spotter="llm"),
        EntityMention("ledger-db", "Service", spotter="llm"),
    ), (RelationMention("payments-api", "ledger-db", "DEPENDS_ON"),
        RelationMention("payments-api", "Acme", "RELATED_TO", predicate="sponsored by")))

    combined = combine_extractions(spotted, by_model)

    types = {e.name: e.type for e in combined.entities}
    assert types == {"payments-api": "Service", "ACME": "Team", "ledger-db": "Service"}
    assert {e.name: e.description for e in combined.entities}["payments-api"] == "Takes card payments."
    assert {(r.source, r.target, r.type, r.predicate) for r in combined.relations} == {
        ("payments-api", "ledger-db", "DEPENDS_ON", ""),
        ("payments-api", "Acme", "RELATED_TO", "sponsored by"),
    }
    assert combine_extractions(spotted, None) is spotted  # the model failed on this chunk: spotters stand


def _corpus_paragraphs() -> list[Chunk]:
    """The sample corpus's paragraphs as chunks: real runbook and service text for spaCy."""
    corpus = Path(__file__).resolve().parents[3] / "data" / "corpus"
    paragraphs = [p for path in sorted(corpus.rglob("*.md")) for p in path.read_text().split("\n\n") if p.strip()]
    return [chunk(text, f"doc-{i // 10}", i % 10) for i, text in enumerate(paragraphs[:600])]


@pytest.mark.slow
def test_ner_in_helper_processes_finds_what_one_process_finds(monkeypatch: pytest.MonkeyPatch) -> None:
    chunks = _corpus_paragraphs()
    titles = {c.doc_id: f"Title {c.doc_id}" for c in chunks}
    alone = make_extractor(ner_processes=1)
    expected = alone.extract(chunks, titles)
    monkeypatch.setattr(extraction_module, "PARALLEL_NER_AFTER_CHARS", 0)
    shared = make_extractor(ner_processes=3)
    try:
        found = shared.extract(chunks[:100], titles)  # annotated here while the helpers start
        helpers = shared._ner_workers
        assert helpers is not None
        while not helpers.ready():
            time.sleep(0.1)  # a wait, not a timing: each later batch is split three ways
        found += [e for start in range(100, len(chunks), 100) for e in shared.extract(chunks[start : start + 100], titles)]
        assert helpers.shared_calls == 5
    finally:
        shared.close()
    assert len(chunks) == 600 and sum(len(e.entities) for e in expected) > 500
    assert found == expected


def test_equal_parts_cover_every_text_once_in_order() -> None:
    for lengths in ([5, 1, 1, 1, 8, 2], [3], [], [1, 1], [10, 0, 0, 10]):
        for parts in (1, 2, 3, 5):
            bounds = _equal_parts(lengths, parts)
            assert len(bounds) == parts
            assert [i for start, end in bounds for i in range(start, end)] == list(range(len(lengths)))
    assert _equal_parts([4, 4, 4, 4], 2) == [(0, 2), (2, 4)]


def test_the_number_of_ner_processes_is_not_part_of_the_extractor_key(tmp_path: Path) -> None:
    keys = set()
    for processes in (None, 1, 4):
        configured = settings(ner_processes=processes).with_overrides(index_dir=str(tmp_path / "index"))
        with Workspace(configured) as workspace:
            keys.add(workspace.extractor_family)
    assert len(keys) == 1


@pytest.mark.parametrize("files, expected", [
    ({}, 2),  # no cgroup files: the affinity
    ({"cpu.max": "max 100000\n"}, 2),  # v2, no limit
    ({"cpu.max": "100000 100000\n"}, 1),  # v2, one CPU
    ({"cpu.max": "150000 100000\n"}, 2),  # v2, 1.5 CPUs: a second process still has half a CPU
    ({"cpu.max": "800000 100000\n"}, 2),  # a quota above the affinity: the affinity
    ({"cpu/cpu.cfs_quota_us": "50000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 1),  # v1, half a CPU
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, 2),  # v1, no limit
    ({"cpu.max": "garbled"}, 2),
])
def test_available_cores_heed_a_cgroup_cpu_limit(tmp_path, monkeypatch, files, expected):
    monkeypatch.setattr(extraction_module.os, "sched_getaffinity", lambda pid: {0, 1})
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert available_cores(tmp_path) == expected
