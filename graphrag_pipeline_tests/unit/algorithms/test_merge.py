import json
from dataclasses import asdict, replace

from graphrag_pipeline.lib.algorithms.merge import (
    ElementKeys,
    element_payload,
    entity_from_payload,
    merge_extractions,
    relationship_from_payload,
)
from graphrag_pipeline.lib.core.config import load_settings
from graphrag_pipeline.lib.core.ids import content_hash, entity_id, normalize_name
from graphrag_pipeline.lib.core.models import ChunkExtraction, EntityMention, RelationMention

ONTOLOGY = load_settings().ontology


def extraction(chunk_id, entities, relations=()):
    return ChunkExtraction(
        chunk_id,
        tuple(EntityMention(n, t, d, chunk_id, "test") for n, t, d in entities),
        tuple(RelationMention(s, o, t, p, d, w, chunk_id) for s, o, t, p, d, w in relations),
    )


def test_one_real_world_entity_is_one_node_with_provenance():
    entities, _ = merge_extractions(
        [
            ("doc-1", extraction("c1", [("Payments-API", "Service", "payments-api takes card payments.")])),
            ("doc-2", extraction("c2", [(" payments-api ", "CONCEPT", "It is written in Go.")])),
            ("doc-2", extraction("c3", [("payments-api", "Service", "payments-api takes card payments.")])),
        ],
        ONTOLOGY,
    )
    assert len(entities) == 1
    entity = entities[0]
    assert entity.entity_id == entity_id("payments-api")
    assert entity.name == "payments-api"  # the most frequent spelling
    assert entity.type == "Service"  # a specific type beats the default
    assert entity.mention_count == 3
    assert entity.chunk_ids == ("c1", "c2", "c3") and entity.doc_ids == ("doc-1", "doc-2")
    assert entity.description.count("takes card payments") == 1 and "written in Go" in entity.description


def test_ner_labels_decide_a_type_only_when_no_other_spotter_gave_one():
    """spaCy's person, place and organization labels mean little in technical text: two NER votes for PERSON lose to
    one pattern's Service; alone, they still type the node (a person in prose)."""
    mentions = [EntityMention("Pgbouncer", "PERSON", "", f"c{n}", "ner") for n in range(2)]
    mentions.append(EntityMention("pgbouncer", "Service", "", "c9", "pattern"))
    entities, _ = merge_extractions([("d", ChunkExtraction("c", tuple(mentions), ()))], ONTOLOGY)
    assert [(e.canonical, e.type) for e in entities] == [("pgbouncer", "Service")]
    alone, _ = merge_extractions([("d", ChunkExtraction("c", tuple(mentions[:2]), ()))], ONTOLOGY)
    assert [e.type for e in alone] == ["PERSON"]


def test_aliases_merge_entities():
    entities, _ = merge_extractions(
        [("d", extraction("c1", [("K8s", "TECHNOLOGY", ""), ("Kubernetes", "TECHNOLOGY", "")]))],
        ONTOLOGY,
        aliases={"k8s": "Kubernetes"},
    )
    assert [e.canonical for e in entities] == ["kubernetes"]


def test_untyped_relations_are_symmetric_and_typed_ones_keep_direction():
    _, relationships = merge_extractions(
        [
            ("d1", extraction("c1", [("a-api", "Service", ""), ("b-api", "Service", "")], [
                ("a-api", "b-api", "RELATED_TO", "co-occurs", "x", 1.0),
                ("a-api", "b-api", "DEPENDS_ON", "calls", "a calls b", 1.0),
            ])),
            ("d2", extraction("c2", [], [
                ("b-api", "a-api", "RELATED_TO", "co-occurs", "y", 0.5),
                ("b-api", "a-api", "DEPENDS_ON", "calls", "b calls a", 1.0),
                ("b-api", "a-api", "NOT_IN_ONTOLOGY", "frobnicates", "", 1.0),
            ])),
        ],
        ONTOLOGY,
    )
    related = [r for r in relationships if r.type == "RELATED_TO"]
    depends = [r for r in relationships if r.type == "DEPENDS_ON"]
    assert len(related) == 1 and related[0].weight == 2.5  # both directions and the out-of-ontology one merged
    assert "frobnicates" in related[0].predicates
    assert len(depends) == 2  # a→b and b→a are different facts
    assert {(r.source_id, r.target_id) for r in depends} == {
        (entity_id("a-api"), entity_id("b-api")), (entity_id("b-api"), entity_id("a-api"))}


def test_relation_endpoints_become_entities_and_self_loops_are_dropped():
    entities, relationships = merge_extractions(
        [("d", extraction("c1", [], [("X", "Y", "RELATED_TO", "", "", 1.0), ("X", "x", "RELATED_TO", "", "", 1.0)]))],
        ONTOLOGY,
    )
    assert sorted(e.canonical for e in entities) == ["x", "y"]
    assert len(relationships) == 1


def test_merge_is_independent_of_input_order_and_round_trips():
    items = [
        ("d1", extraction("c1", [("Alpha", "PERSON", "one"), ("Beta", "PERSON", "two")],
                          [("Alpha", "Beta", "RELATED_TO", "pays", "s", 1.0)])),
        ("d2", extraction("c2", [("Beta", "ORGANIZATION", "three")])),
    ]
    forward = merge_extractions(items, ONTOLOGY)
    backward = merge_extractions(list(reversed(items)), ONTOLOGY)
    assert forward == backward
    entity = forward[0][0]
    digest, payload = element_payload(entity)
    assert entity_from_payload(json.loads(payload)) == entity
    assert digest == element_payload(backward[0][0])[0]
    relationship = forward[1][0]
    assert relationship_from_payload(json.loads(element_payload(relationship)[1])) == relationship
    # What the graph stores are given: every field but the provenance of descriptions and predicates.
    assert entity.description_parts and relationship.description_parts and relationship.predicate_doc_ids
    assert entity_from_payload(json.loads(payload), provenance=False) == replace(entity, description_parts=())
    assert relationship_from_payload(json.loads(element_payload(relationship)[1]), provenance=False) == replace(
        relationship, description_parts=(), predicate_doc_ids=())


def test_an_entity_named_by_a_relationship_before_its_mention_merges_as_one_named_first():
    """An endpoint's spelling and the default type count only for an entity no spotter reported, wherever in the
    input the relationship comes: an incremental merge reads the chunks in another selection than a full one."""
    mentioned = ("d2", extraction("c2", [("Payments API", "SERVICE", "the API")]))
    named = ("d1", extraction("c1", [("Cart", "SERVICE", "")],
                              [("Cart", "payments API", "RELATED_TO", "", "calls it", 1.0)]))
    endpoint_first = merge_extractions([named, mentioned], ONTOLOGY)
    assert endpoint_first == merge_extractions([mentioned, named], ONTOLOGY)
    payments = next(e for e in endpoint_first[0] if e.canonical == "payments api")
    assert (payments.name, payments.type, payments.aliases) == ("Payments API", ONTOLOGY.entity_type("SERVICE"), ())
    only_endpoint = merge_extractions([named], ONTOLOGY)[0]
    assert [(e.name, e.type) for e in only_endpoint if e.canonical == "payments api"] == [
        ("payments API", ONTOLOGY.default_entity_type)]


def test_a_merge_of_some_elements_equals_them_in_the_merge_of_all():
    items = [
        ("d1", extraction("c1", [("Alpha", "PERSON", "one"), ("Beta", "PERSON", "two"), ("Gamma", "PERSON", "")],
                          [("Alpha", "Beta", "RELATED_TO", "", "s", 1.0), ("Beta", "Gamma", "RELATED_TO", "", "t", 2.0)])),
        ("d2", extraction("c2", [("Beta", "ORGANIZATION", "three"), ("Delta", "PERSON", "")],
                          [("Beta", "Delta", "RELATED_TO", "", "u", 1.0)])),
    ]
    entities, relationships = merge_extractions(items, ONTOLOGY)
    some_entities = [e for e in entities if e.canonical in ("beta", "delta")]
    some_relationships = [r for r in relationships if "u" in r.description]
    only = ElementKeys.of(some_entities, some_relationships)
    assert merge_extractions(items, ONTOLOGY, only=only) == (some_entities, some_relationships)


def test_element_payload_is_the_json_of_every_field_so_stored_hashes_stay_valid():
    """Indexes hold these hashes (cut to their first 128 bits by state schema 4): a payload spelled differently
    makes every element that a merge touches look changed once, and the graph stage write it again. The spelling is
    orjson's, sorted keys without spaces (the standard library's, with spaces, before this version)."""
    entities, relationships = merge_extractions(
        [("d1", extraction("c1", [("Alpha", "PERSON", "one"), ("Beta", "PERSON", "two")],
                           [("Alpha", "Beta", "WORKS_FOR", "works for", "Alpha works for Beta.", 1.5)]))],
        ONTOLOGY,
    )
    for element in (*entities, *relationships):
        spelled = json.dumps(asdict(element), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert element_payload(element) == (content_hash(spelled)[:32], spelled)


def test_normalize_name_collapses_spacing_around_hyphens():
    assert normalize_name("Person - centered therapy") == normalize_name("Person-centered therapy")
    assert normalize_name("  The  Beatles. ") == "the beatles"


def test_normalize_name_splits_camel_case_and_folds_accents():
    assert normalize_name("NodeRAIDDegraded") == normalize_name("Node RAID Degraded") == "node raid degraded"
    assert normalize_name("Aschenbrödel") == normalize_name("Aschenbrodel")
    assert normalize_name("payments-api") == normalize_name("Payments-API")
    # Compatibility forms and case folding that changes length (not only accents) are folded like ASCII text.
    assert [normalize_name(n) for n in ("ﬁle", "Ｆｕｌｌ Ｓｔａｃｋ", "Straße", "Zürich")] == [
        "file", "full stack", "strasse", "zurich"]
