"""Element summaries: merge per-chunk mentions into one entity per real-world thing and one relationship per typed
pair, keeping every description's provenance. Deterministic (no model): the same mentions give the same elements,
whatever order the chunks were processed in.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Iterable, Mapping

from graphrag_pipeline.lib.config import Ontology
from graphrag_pipeline.lib.ids import content_hash, entity_id, normalize_name, relationship_id
from graphrag_pipeline.lib.models import ChunkExtraction, Entity, Relationship

MAX_DESCRIPTIONS = 5
MAX_DESCRIPTION_CHARS = 1200
DEFAULT_LIMITS = (MAX_DESCRIPTIONS, MAX_DESCRIPTION_CHARS)
# What a model summarizing an element's descriptions may read (summarizer llm); what it writes replaces the list.
LLM_INPUT_DESCRIPTIONS = 50
LLM_INPUT_DESCRIPTION_CHARS = 12000
MAX_PROVENANCE = 5000  # chunk ids kept per element; counts stay exact


@dataclass
class _EntityAccumulator:
    surface_forms: Counter = field(default_factory=Counter)
    types: Counter = field(default_factory=Counter)
    catalog_types: Counter = field(default_factory=Counter)  # types a structured catalog states: they win the vote
    descriptions: dict[str, tuple[str, str]] = field(default_factory=dict)  # text -> first (doc, chunk) seen
    chunk_ids: set[str] = field(default_factory=set)
    doc_ids: set[str] = field(default_factory=set)


@dataclass
class _RelationAccumulator:
    weight: float = 0.0
    descriptions: dict[str, tuple[str, str]] = field(default_factory=dict)
    predicates: set[str] = field(default_factory=set)
    chunk_ids: set[str] = field(default_factory=set)
    doc_ids: set[str] = field(default_factory=set)


def merge_extractions(
    extractions: Iterable[tuple[str, ChunkExtraction]],
    ontology: Ontology,
    aliases: Mapping[str, str] | None = None,
    description_limits: tuple[int, int] = DEFAULT_LIMITS,
) -> tuple[list[Entity], list[Relationship]]:
    """(doc_id, extraction) pairs → merged entities and relationships, sorted by id. Each description is the distinct
    descriptions in document order, one per line, up to ``description_limits`` (count, characters)."""
    alias_keys = {normalize_name(k): normalize_name(v) for k, v in (aliases or {}).items()}

    def key_of(name: str) -> str:
        key = normalize_name(name)
        return alias_keys.get(key, key)

    entities: dict[str, _EntityAccumulator] = defaultdict(_EntityAccumulator)
    relations: dict[tuple[str, str, str], _RelationAccumulator] = defaultdict(_RelationAccumulator)
    symmetric_type = ontology.fallback_relationship_type

    for doc_id, extraction in extractions:
        chunk_id = extraction.chunk_id
        for mention in extraction.entities:
            key = key_of(mention.name)
            if not key:
                continue
            acc = entities[key]
            acc.surface_forms[mention.name.strip()] += 1
            acc.types[ontology.entity_type(mention.type)] += 1
            if mention.spotter == "catalog":
                acc.catalog_types[ontology.entity_type(mention.type)] += 1
            if mention.description and mention.description not in acc.descriptions:
                acc.descriptions[mention.description] = (doc_id, chunk_id)
            acc.chunk_ids.add(chunk_id)
            acc.doc_ids.add(doc_id)
        for relation in extraction.relations:
            source_key, target_key = key_of(relation.source), key_of(relation.target)
            if not source_key or not target_key or source_key == target_key:
                continue
            for key, name in ((source_key, relation.source), (target_key, relation.target)):
                if key not in entities:  # an endpoint no spotter reported as an entity still becomes one
                    acc = entities[key]
                    acc.surface_forms[name.strip()] += 1
                    acc.types[ontology.default_entity_type] += 1
                entities[key].chunk_ids.add(chunk_id)
                entities[key].doc_ids.add(doc_id)
            rel_type = relation.type if relation.type in ontology.relationship_type_names else symmetric_type
            if rel_type == symmetric_type and target_key < source_key:
                # Untyped association has no direction: A–B and B–A are one relationship.
                source_key, target_key = target_key, source_key
            acc_r = relations[(source_key, rel_type, target_key)]
            acc_r.weight += relation.weight
            if relation.description and relation.description not in acc_r.descriptions:
                acc_r.descriptions[relation.description] = (doc_id, chunk_id)
            if relation.predicate:
                acc_r.predicates.add(relation.predicate)
            acc_r.chunk_ids.add(chunk_id)
            acc_r.doc_ids.add(doc_id)

    merged_entities = [_entity(key, acc, ontology, description_limits) for key, acc in entities.items()]
    merged_relations = [
        Relationship(
            relationship_id=relationship_id(entity_id(s), t, entity_id(o)),
            source_id=entity_id(s),
            target_id=entity_id(o),
            type=t,
            description=_merge_descriptions(acc.descriptions, description_limits),
            weight=round(acc.weight, 6),
            chunk_ids=tuple(sorted(acc.chunk_ids))[:MAX_PROVENANCE],
            doc_ids=tuple(sorted(acc.doc_ids)),
            predicates=tuple(sorted(acc.predicates)),
        )
        for (s, t, o), acc in relations.items()
    ]
    merged_entities.sort(key=lambda e: e.entity_id)
    merged_relations.sort(key=lambda r: r.relationship_id)
    return merged_entities, merged_relations


def _entity(key: str, acc: _EntityAccumulator, ontology: Ontology, description_limits: tuple[int, int]) -> Entity:
    # Most frequent spelling wins; ties go to the longest, then alphabetical, so the choice is order-independent.
    name = sorted(acc.surface_forms.items(), key=lambda kv: (-kv[1], -len(kv[0]), kv[0]))[0][0]
    stated = {t: n for t, n in acc.catalog_types.items() if t != ontology.default_entity_type}
    specific = stated or {t: n for t, n in acc.types.items() if t != ontology.default_entity_type}
    type_votes = specific or acc.types
    entity_type = sorted(type_votes.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
    aliases = tuple(sorted(form for form in acc.surface_forms if form != name))
    return Entity(
        entity_id=entity_id(key),
        name=name,
        canonical=key,
        type=entity_type,
        description=_merge_descriptions(acc.descriptions, description_limits),
        mention_count=len(acc.chunk_ids),
        chunk_ids=tuple(sorted(acc.chunk_ids))[:MAX_PROVENANCE],
        doc_ids=tuple(sorted(acc.doc_ids)),
        aliases=aliases[:50],
    )


def _merge_descriptions(descriptions: dict[str, tuple[str, str]], limits: tuple[int, int]) -> str:
    """Distinct descriptions in document order, capped, so the merge is stable under re-processing."""
    ordered = sorted(descriptions.items(), key=lambda kv: (kv[1], kv[0]))
    return capped_descriptions([text for text, _ in ordered], *limits)


def capped_descriptions(
    descriptions: list[str], max_descriptions: int = MAX_DESCRIPTIONS, max_chars: int = MAX_DESCRIPTION_CHARS
) -> str:
    """The first descriptions, one per line, within ``max_descriptions`` and ``max_chars`` (always at least one)."""
    kept: list[str] = []
    total = 0
    for text in descriptions[:max_descriptions]:
        if total + len(text) > max_chars and kept:
            break
        kept.append(text)
        total += len(text)
    return "\n".join(kept)


def element_payload(element: Entity | Relationship) -> tuple[str, str]:
    """(content hash, JSON) of an element: the hash tells the graph stage whether the store needs the write."""
    payload = json.dumps(asdict(element), sort_keys=True)
    return content_hash(payload), payload


def entity_from_payload(data: dict) -> Entity:
    return Entity(**{**data, "chunk_ids": tuple(data["chunk_ids"]), "doc_ids": tuple(data["doc_ids"]),
                     "aliases": tuple(data.get("aliases", ()))})


def relationship_from_payload(data: dict) -> Relationship:
    return Relationship(**{**data, "chunk_ids": tuple(data["chunk_ids"]), "doc_ids": tuple(data["doc_ids"]),
                           "predicates": tuple(data.get("predicates", ()))})
