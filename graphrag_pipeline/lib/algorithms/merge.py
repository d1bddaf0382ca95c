"""Element summaries: merge per-chunk mentions into one entity per real-world thing and one relationship per typed
pair, keeping every description's provenance: which documents state each description part and each predicate,
so that a reader is shown only what some document it may read says (query.access). Deterministic (no model): the same mentions give the same elements,
whatever order the chunks were processed in.
"""

from __future__ import annotations

import functools
from collections import Counter, defaultdict
from dataclasses import dataclass, field, fields
from typing import Iterable, Mapping, Sequence

import orjson

from graphrag_pipeline.lib.core.config import Ontology
from graphrag_pipeline.lib.core.ids import entity_id, name_variants, normalize_name, relationship_id, short_hash
from graphrag_pipeline.lib.core.models import ChunkExtraction, Entity, Relationship

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
    endpoint_forms: Counter = field(default_factory=Counter)  # spellings of relationship endpoints
    types: Counter = field(default_factory=Counter)
    catalog_types: Counter = field(default_factory=Counter)  # types a structured catalog states: they win the vote
    # types the other spotters than NER give (dictionary, patterns, titles): NER's labels (PERSON, LOCATION …) mean
    # little in technical text, so they decide a type only when nothing else gave one
    spotted_types: Counter = field(default_factory=Counter)
    catalog_forms: set[str] = field(default_factory=set)  # how a structured catalog spells the name
    descriptions: dict[str, tuple[str, str]] = field(default_factory=dict)  # text -> first (doc, chunk) seen
    description_docs: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # text -> every doc
    chunk_ids: set[str] = field(default_factory=set)
    doc_ids: set[str] = field(default_factory=set)


@dataclass
class _RelationAccumulator:
    weight: float = 0.0
    descriptions: dict[str, tuple[str, str]] = field(default_factory=dict)
    description_docs: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    predicates: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # wording -> docs using it
    chunk_ids: set[str] = field(default_factory=set)
    doc_ids: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class ElementKeys:
    """Which elements a merge makes: entities by canonical key, relationships by (source key, type, target key)."""

    entities: frozenset[str]
    relationships: frozenset[tuple[str, str, str]]

    @classmethod
    def of(cls, entities: Sequence[Entity], relationships: Sequence[Relationship]) -> "ElementKeys":
        canonical = {e.entity_id: e.canonical for e in entities}  # every endpoint of a merge's relationship is one
        return cls(frozenset(canonical.values()),
                   frozenset((canonical[r.source_id], r.type, canonical[r.target_id]) for r in relationships))


@dataclass(frozen=True)
class CatalogResolution:
    """How the names of catalog entities resolve: ``keys`` maps a name key to the catalog node it unambiguously
    names; ``names`` lists each catalog node's other names (every one, ambiguous or not: a question naming a title
    two catalog entities share links to both)."""

    keys: dict[str, str]
    names: dict[str, tuple[str, ...]]
    titles: dict[str, str] = field(default_factory=dict)  # catalog node key -> the catalog's title of it


def resolve_catalog_names(
    catalog_names: Mapping[str, Sequence[str]], catalog_titles: Mapping[str, str] | None = None
) -> CatalogResolution:
    """Catalog node name → its other names (title, aliases, references) into one resolution; ``catalog_titles``
    (node name → title) become the entities' ``title``.

    A name key resolves to the catalog node whose *own* name it is; failing that, to the one node that declares it
    (title, alias, the plain name of a namespaced entity); failing that, to the one node with a spelling variant of
    it (spaces, hyphens, joined words). A key two nodes claim at the same level resolves to neither: merging two
    services because their titles match would be worse than leaving a text mention unresolved.
    """
    own = {normalize_name(node) for node in catalog_names}
    claims: dict[str, list[set[str]]] = defaultdict(lambda: [set(), set()])  # key -> [declaring, variant] nodes
    for node, others in catalog_names.items():
        node_key = normalize_name(node)
        for name in others:
            claims[normalize_name(name)][0].add(node_key)
        for name in (node, *others):
            for variant in name_variants(name):
                claims[variant][1].add(node_key)
    keys: dict[str, str] = {}
    for key, levels in claims.items():
        if key in own or not key:
            continue
        claimants = next((nodes for nodes in levels if nodes), set())
        if len(claimants) == 1:
            keys[key] = next(iter(claimants))
    names = {normalize_name(node): tuple(dict.fromkeys(others)) for node, others in catalog_names.items()}
    titles = {normalize_name(node): title for node, title in (catalog_titles or {}).items()}
    return CatalogResolution(keys, names, titles)


def merge_extractions(
    extractions: Iterable[tuple[str, ChunkExtraction]],
    ontology: Ontology,
    aliases: Mapping[str, str] | None = None,
    description_limits: tuple[int, int] = DEFAULT_LIMITS,
    catalog: CatalogResolution | None = None,
    only: ElementKeys | None = None,
) -> tuple[list[Entity], list[Relationship]]:
    """(doc_id, extraction) pairs → merged entities and relationships, sorted by id. Each description is the distinct
    descriptions in document order, one per line, up to ``description_limits`` (count, characters). ``aliases``
    (configured) map a name to its canonical name; ``catalog`` resolves the names of catalog entities, which then
    also keep the catalog's name and type, whatever text called them. ``only``: merge these elements alone (the
    extractions must hold every mention of them), passing over the others' mentions."""
    catalog = catalog or CatalogResolution({}, {})
    alias_keys = {**catalog.keys, **{normalize_name(k): normalize_name(v) for k, v in (aliases or {}).items()}}

    @functools.cache  # one merge sees each surface form many times
    def key_of(name: str) -> str:
        key = normalize_name(name)
        return alias_keys.get(key, key)

    entities: dict[str, _EntityAccumulator] = defaultdict(_EntityAccumulator)
    relations: dict[tuple[str, str, str], _RelationAccumulator] = defaultdict(_RelationAccumulator)
    symmetric_type = ontology.fallback_relationship_type
    relationship_types = ontology.relationship_type_names
    entity_type = functools.cache(ontology.entity_type)

    for doc_id, extraction in extractions:
        chunk_id = extraction.chunk_id
        for mention in extraction.entities:
            key = key_of(mention.name)
            if not key or (only is not None and key not in only.entities):
                continue
            acc = entities[key]
            acc.surface_forms[mention.name.strip()] += 1
            acc.types[entity_type(mention.type)] += 1
            if mention.spotter != "ner":
                acc.spotted_types[entity_type(mention.type)] += 1
            if mention.spotter == "catalog":
                acc.catalog_types[entity_type(mention.type)] += 1
                acc.catalog_forms.add(mention.name.strip())
            if mention.description:
                acc.descriptions.setdefault(mention.description, (doc_id, chunk_id))
                acc.description_docs[mention.description].add(doc_id)
            acc.chunk_ids.add(chunk_id)
            acc.doc_ids.add(doc_id)
        for relation in extraction.relations:
            source_key, target_key = key_of(relation.source), key_of(relation.target)
            if not source_key or not target_key or source_key == target_key:
                continue
            for key, name in ((source_key, relation.source), (target_key, relation.target)):
                if only is not None and key not in only.entities:
                    continue
                acc = entities[key]  # an endpoint no spotter reported as an entity still becomes one
                acc.endpoint_forms[name.strip()] += 1
                acc.chunk_ids.add(chunk_id)
                acc.doc_ids.add(doc_id)
            rel_type = relation.type if relation.type in relationship_types else symmetric_type
            if rel_type == symmetric_type and target_key < source_key:
                # Untyped association has no direction: A–B and B–A are one relationship.
                source_key, target_key = target_key, source_key
            if only is not None and (source_key, rel_type, target_key) not in only.relationships:
                continue
            acc_r = relations[(source_key, rel_type, target_key)]
            acc_r.weight += relation.weight
            if relation.description:
                acc_r.descriptions.setdefault(relation.description, (doc_id, chunk_id))
                acc_r.description_docs[relation.description].add(doc_id)
            if relation.predicate:
                acc_r.predicates[relation.predicate].add(doc_id)
            acc_r.chunk_ids.add(chunk_id)
            acc_r.doc_ids.add(doc_id)

    merged_entities = [_entity(key, acc, ontology, description_limits, catalog.names.get(key),
                               catalog.titles.get(key, ""))
                       for key, acc in entities.items()]
    entity_ids = {e.canonical: e.entity_id for e in merged_entities}
    merged_relations = [_relationship(s, t, o, acc, description_limits, entity_ids)
                        for (s, t, o), acc in relations.items()]
    merged_entities.sort(key=lambda e: e.entity_id)
    merged_relations.sort(key=lambda r: r.relationship_id)
    return merged_entities, merged_relations


def _entity(
    key: str,
    acc: _EntityAccumulator,
    ontology: Ontology,
    description_limits: tuple[int, int],
    catalog_names: tuple[str, ...] | None,
    catalog_title: str,
) -> Entity:
    # Most frequent spelling wins; ties go to the longest, then alphabetical, so the choice is order-independent.
    # A catalog entity keeps the catalog's spelling of its name: the node is the catalog's, text only mentions it.
    # An entity only relationships name (no spotter reported it) is spelled as they do, with the default type.
    seen = acc.surface_forms or acc.endpoint_forms
    catalog_spelling = [form for form in acc.catalog_forms if normalize_name(form) == key]
    forms = Counter(catalog_spelling) if catalog_spelling else seen
    name = sorted(forms.items(), key=lambda kv: (-kv[1], -len(kv[0]), kv[0]))[0][0]
    stated = {t: n for t, n in acc.catalog_types.items() if t != ontology.default_entity_type}
    spotted = {t: n for t, n in acc.spotted_types.items() if t != ontology.default_entity_type}
    specific = stated or spotted or {t: n for t, n in acc.types.items() if t != ontology.default_entity_type}
    type_votes = specific or acc.types or {ontology.default_entity_type: 1}
    entity_type = sorted(type_votes.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
    # The catalog's names first: the list is capped, and they are what questions use.
    aliases = tuple(dict.fromkeys(form for form in (*(catalog_names or ()), *sorted(seen))
                                  if form != name))
    parts = _description_parts(acc, description_limits)
    return Entity(
        entity_id=entity_id(key),
        name=name,
        canonical=key,
        type=entity_type,
        description="\n".join(text for text, _ in parts),
        mention_count=len(acc.chunk_ids),
        chunk_ids=tuple(sorted(acc.chunk_ids))[:MAX_PROVENANCE],
        doc_ids=tuple(sorted(acc.doc_ids)),
        aliases=aliases[:50],
        description_parts=parts,
        title=catalog_title,
    )


def _relationship(
    source: str,
    rel_type: str,
    target: str,
    acc: _RelationAccumulator,
    description_limits: tuple[int, int],
    entity_ids: Mapping[str, str],
) -> Relationship:
    """``entity_ids``: the merged entities' ids by canonical key (every endpoint is one)."""
    parts = _description_parts(acc, description_limits)
    predicates = sorted(acc.predicates)
    return Relationship(
        relationship_id=relationship_id(entity_ids[source], rel_type, entity_ids[target]),
        source_id=entity_ids[source],
        target_id=entity_ids[target],
        type=rel_type,
        description="\n".join(text for text, _ in parts),
        weight=round(acc.weight, 6),
        chunk_ids=tuple(sorted(acc.chunk_ids))[:MAX_PROVENANCE],
        doc_ids=tuple(sorted(acc.doc_ids)),
        predicates=tuple(predicates),
        description_parts=parts,
        predicate_doc_ids=tuple(tuple(sorted(acc.predicates[p])) for p in predicates),
    )


def _description_parts(
    acc: _EntityAccumulator | _RelationAccumulator, limits: tuple[int, int]
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Distinct descriptions in document order, capped, so the merge is stable under re-processing; each with every
    document that states it."""
    ordered = sorted(acc.descriptions.items(), key=lambda kv: (kv[1], kv[0]))
    kept = kept_descriptions([text for text, _ in ordered], *limits)
    return tuple((text, tuple(sorted(acc.description_docs[text]))) for text in kept)


def kept_descriptions(
    descriptions: list[str], max_descriptions: int = MAX_DESCRIPTIONS, max_chars: int = MAX_DESCRIPTION_CHARS
) -> list[str]:
    """The first descriptions within ``max_descriptions`` and ``max_chars`` (always at least one, if any)."""
    kept: list[str] = []
    total = 0
    for text in descriptions[:max_descriptions]:
        if total + len(text) > max_chars and kept:
            break
        kept.append(text)
        total += len(text)
    return kept


def capped_descriptions(
    descriptions: list[str], max_descriptions: int = MAX_DESCRIPTIONS, max_chars: int = MAX_DESCRIPTION_CHARS
) -> str:
    """The first descriptions, one per line, within ``max_descriptions`` and ``max_chars`` (always at least one)."""
    return "\n".join(kept_descriptions(descriptions, max_descriptions, max_chars))


def capped_parts(
    parts: tuple[tuple[str, tuple[str, ...]], ...], limits: tuple[int, int] = DEFAULT_LIMITS
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The first description parts within the limits, with their documents."""
    kept = kept_descriptions([text for text, _ in parts], *limits)
    return parts[: len(kept)]


def element_payload(element: Entity | Relationship) -> tuple[str, str]:
    """(content hash, JSON) of an element: the hash tells the graph stage whether the store needs the write."""
    digest, data = element_record(element)
    return digest, orjson.dumps(data, option=orjson.OPT_SORT_KEYS).decode()


def element_record(element: Entity | Relationship) -> tuple[str, dict]:
    """(content hash, fields) of an element: ``element_payload`` before the JSON, which the state store writes in
    its own form (its texts apart) and would otherwise parse back."""
    # orjson writes the fields' tuples as lists itself (dataclasses.asdict's deep copy of every element cost more
    # than the merge itself), in a sixth of the standard library's time.
    data = {name: getattr(element, name) for name in _field_names(type(element))}
    return short_hash(orjson.dumps(data, option=orjson.OPT_SORT_KEYS).decode()), data


@functools.cache
def _field_names(element_type: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(element_type))


def entity_from_payload(data: dict, provenance: bool = True) -> Entity:
    """``provenance=False``: without the description parts, which no graph store keeps (reading them back was a
    third of the time the graph stage spent reading a build's elements)."""
    return Entity(**{**data, "chunk_ids": tuple(data["chunk_ids"]), "doc_ids": tuple(data["doc_ids"]),
                     "aliases": tuple(data.get("aliases", ())),
                     "description_parts": _parts_from_json(data.get("description_parts", ())) if provenance else ()})


def relationship_from_payload(data: dict, provenance: bool = True) -> Relationship:
    """``provenance=False``: without the description parts and the documents of each predicate (see
    ``entity_from_payload``)."""
    return Relationship(**{**data, "chunk_ids": tuple(data["chunk_ids"]), "doc_ids": tuple(data["doc_ids"]),
                           "predicates": tuple(data.get("predicates", ())),
                           "description_parts": _parts_from_json(data.get("description_parts", ())) if provenance
                           else (),
                           "predicate_doc_ids": tuple(tuple(docs) for docs in data.get("predicate_doc_ids", ()))
                           if provenance else ()})


def _parts_from_json(parts: Sequence) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return tuple((text, tuple(docs)) for text, docs in parts)
