"""Entity and relationship extraction by a language model, into the same records the offline extractor produces.

Per chunk: one extraction call (prompt ``extract_graph``, listing the ontology's types with their descriptions),
then up to ``max_gleanings`` gleaning calls (prompt ``glean_graph``) asking for what was missed, merged by
normalized name. The answer is JSON parsed into pydantic models; an unusable answer gets one repair call.

Mapping onto the ontology:

- an entity type outside the ontology becomes the ontology's default entity type;
- a relationship type outside the ontology becomes the fallback type (RELATED_TO), the model's wording kept as the
  mention's ``predicate``;
- a relationship endpoint the model did not list as an entity is added as an entity of the default type, so every
  relation's endpoints are mentions of the chunk (chunk-to-entity links and provenance stay complete);
- self-relations and nameless entities are dropped.

Failure does not stop the run: a chunk whose answer is still unusable after the repair, or whose call fails after
all retries, becomes a ``Quarantined`` record (chunk id, reason, raw output) and yields no extraction, and the other
chunks go on. A gleaning answer that stays unusable is dropped and the chunk keeps what it already has. Only
``BudgetExceeded`` propagates, so the caller can stop the run cleanly. The exception is a server that answers no
chunk at all: ``fail_if_model_unreachable`` turns that into ``ModelUnreachable``, so a run whose only extractor is
the model fails instead of succeeding with an empty graph.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from graphrag_pipeline.lib.core.config import Ontology
from graphrag_pipeline.lib.core.ids import content_hash, normalize_name
from graphrag_pipeline.lib.core.models import Chunk, ChunkExtraction, EntityMention, Quarantined, RelationMention
from graphrag_pipeline.lib.llm.errors import LLMError, LLMUnavailable
from graphrag_pipeline.lib.llm.prompts import PromptTemplate, packaged_template
from graphrag_pipeline.lib.llm.runner import LLMRunner
from graphrag_pipeline.lib.llm.structured import complete_structured

log = logging.getLogger(__name__)

STAGE = "extraction"
UNREACHABLE = "model server unreachable"  # how a quarantine reason starts when the server, not the chunk, failed
SPOTTER = "llm"
SCHEMA_NAME = "knowledge_graph"
MAX_STRENGTH = 10.0  # the prompt asks for strength 1-10; mention weights are strength / 10

_GRAPH_PLACEHOLDERS = frozenset({"entity_types", "relationship_types", "title", "text"})
_GLEAN_PLACEHOLDERS = _GRAPH_PLACEHOLDERS | {"previous"}


class ExtractedEntity(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str
    type: str = ""
    description: str | None = ""


class ExtractedRelationship(BaseModel):
    model_config = ConfigDict(extra="ignore")

    source: str
    target: str
    type: str = ""
    description: str | None = ""
    strength: float | None = None


class ExtractedGraph(BaseModel):
    """What the model answers for one chunk (or one gleaning pass)."""

    model_config = ConfigDict(extra="ignore")

    entities: list[ExtractedEntity]
    relationships: list[ExtractedRelationship] = Field(default_factory=list)


def extraction_schema(ontology: Ontology) -> dict[str, Any]:
    """JSON schema sent to servers that support structured output. Entity types are an enum (the model cannot
    invent one); relationship types are free text, so a relation outside the ontology keeps its own wording."""
    string = {"type": "string"}
    return {
        "type": "object",
        "properties": {
            "entities": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": string,
                        "type": {"type": "string", "enum": sorted(ontology.entity_type_names)},
                        "description": string,
                    },
                    "required": ["name", "type", "description"],
                },
            },
            "relationships": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "source": string,
                        "target": string,
                        "type": string,
                        "description": string,
                        "strength": {"type": "number", "minimum": 1, "maximum": MAX_STRENGTH},
                    },
                    "required": ["source", "target", "type", "description", "strength"],
                },
            },
        },
        "required": ["entities", "relationships"],
    }


class LLMExtractor:
    def __init__(
        self,
        runner: LLMRunner,
        ontology: Ontology,
        *,
        max_gleanings: int = 0,
        extract_template: PromptTemplate | None = None,
        glean_template: PromptTemplate | None = None,
    ):
        self.runner = runner
        self.ontology = ontology
        self.max_gleanings = max_gleanings
        self.extract_template = extract_template or packaged_template("extract_graph", _GRAPH_PLACEHOLDERS)
        self.glean_template = glean_template or packaged_template("glean_graph", _GLEAN_PLACEHOLDERS)
        self.schema = extraction_schema(ontology)
        self._type_lists = {
            "entity_types": _type_list(ontology.entity_types),
            "relationship_types": _type_list(ontology.relationship_types),
        }

    @property
    def version(self) -> str:
        """Changes whenever what this extractor would produce may change: for keying stored extractions."""
        client = self.runner.client
        return content_hash(
            client.provider, client.model, self.extract_template.version, self.glean_template.version,
            str(self.max_gleanings), self.ontology.model_dump_json(),
            json.dumps(client.generation_settings, sort_keys=True),
        )[:16]

    def extract(
        self, chunks: Sequence[Chunk], titles: Mapping[str, str] | None = None
    ) -> tuple[list[ChunkExtraction], list[Quarantined]]:
        """Extractions of the chunks that succeeded (in input order) and quarantine records for the others.
        ``titles`` maps doc_id to the document title, given to the model as context."""
        titles = titles or {}
        results = self.runner.map(lambda chunk: self.extract_chunk(chunk, titles.get(chunk.doc_id, "")), chunks)
        extractions = [r for r in results if isinstance(r, ChunkExtraction)]
        quarantined = [r for r in results if isinstance(r, Quarantined)]
        return extractions, quarantined

    def extract_chunk(self, chunk: Chunk, title: str = "") -> ChunkExtraction | Quarantined:
        values = {**self._type_lists, "title": title, "text": chunk.text}
        try:
            result = complete_structured(
                self.runner, self.extract_template, values, ExtractedGraph,
                json_schema=self.schema, schema_name=SCHEMA_NAME,
            )
            if result.value is None:
                return self._quarantine(chunk, f"unusable model output: {result.error}", result.raw)
            graph = _GraphAccumulator(self.ontology, chunk.chunk_id)
            graph.add(result.value)
            for gleaning in range(self.max_gleanings):
                glean = complete_structured(
                    self.runner, self.glean_template, {**values, "previous": graph.as_json()}, ExtractedGraph,
                    json_schema=self.schema, schema_name=SCHEMA_NAME,
                )
                if glean.value is None:
                    # The first answer stands; asking again would get the same (cached) answer.
                    self.runner.usage.record_failure()
                    log.warning("chunk %s: gleaning pass %d unusable, kept the earlier passes: %s",
                                chunk.chunk_id, gleaning + 1, glean.error)
                    break
                if not graph.add(glean.value):
                    break  # nothing new: a further pass would only repeat this one
        except LLMUnavailable as error:
            # Quarantined chunks are not stored as extracted, so a later run tries them again.
            return self._quarantine(chunk, f"{UNREACHABLE}: {error}", "")
        except LLMError as error:
            return self._quarantine(chunk, f"model call failed: {error}", "")
        return graph.extraction()

    def _quarantine(self, chunk: Chunk, reason: str, raw: str) -> Quarantined:
        self.runner.usage.record_failure()
        log.warning("chunk %s quarantined: %s", chunk.chunk_id, reason)
        return Quarantined(stage=STAGE, item_id=chunk.chunk_id, reason=reason, raw=raw)


class ModelUnreachable(LLMError):
    """The model server answered none of the chunks: a run that goes on would only write an empty graph."""


def fail_if_model_unreachable(chunks: Sequence[Chunk], quarantined: Sequence[Quarantined]) -> None:
    """Raise ``ModelUnreachable`` when every one of ``chunks`` was quarantined because the server could not be
    reached (refused connections, timeouts, 5xx through every retry). The caller asks only while nothing has been
    extracted yet in its run: a server that goes away midway leaves quarantined chunks for the next run instead."""
    unreachable = [q for q in quarantined if q.reason.startswith(UNREACHABLE)]
    if chunks and len(unreachable) == len(chunks):
        raise ModelUnreachable(
            f"the model server answered none of the {len(chunks)} chunks sent to it ({unreachable[-1].reason}); "
            f"nothing was extracted. Start the server or correct llm.base_url (or $OLLAMA_BASE_URL / "
            f"$OPENAI_BASE_URL), then run again"
        )


def _type_list(types) -> str:
    return "\n".join(f"- {t.name}: {t.description}" if t.description else f"- {t.name}" for t in types)


class _GraphAccumulator:
    """One chunk's mentions across passes, deduplicated by normalized name (the first pass's wording wins)."""

    def __init__(self, ontology: Ontology, chunk_id: str):
        self._ontology = ontology
        self._chunk_id = chunk_id
        self._entities: dict[str, EntityMention] = {}
        self._relations: dict[tuple[str, str, str, str], RelationMention] = {}
        self._endpoint_only: set[str] = set()  # added for a relation, never listed as an entity by the model

    def add(self, graph: ExtractedGraph) -> bool:
        """Merge one pass; True when it contributed anything new."""
        before = (len(self._entities), len(self._relations))
        for entity in graph.entities:
            self._add_entity(entity.name, self._ontology.entity_type(entity.type), entity.description or "")
        for relation in graph.relationships:
            source, target = relation.source.strip(), relation.target.strip()
            source_key, target_key = normalize_name(source), normalize_name(target)
            if not source_key or not target_key or source_key == target_key:
                continue
            for name, key in ((source, source_key), (target, target_key)):
                if key not in self._entities:
                    self._add_entity(name, self._ontology.default_entity_type, "")
                    self._endpoint_only.add(key)
            wording = relation.type.strip()
            relation_type = self._ontology.relationship_type(wording)
            # The wording is kept only when the type does not already say it: "owned by" is OWNED_BY, while
            # "designed" fell back to RELATED_TO and would otherwise be lost.
            predicate = "" if _type_key(wording) == relation_type.upper() else wording
            key = (source_key, target_key, relation_type, predicate.casefold())
            if key not in self._relations:
                self._relations[key] = RelationMention(
                    source=source,
                    target=target,
                    type=relation_type,
                    predicate=predicate,
                    description=(relation.description or "").strip(),
                    weight=_weight(relation.strength),
                    chunk_id=self._chunk_id,
                )
        return (len(self._entities), len(self._relations)) != before

    def _add_entity(self, name: str, entity_type: str, description: str) -> None:
        name = name.strip()
        key = normalize_name(name)
        # First listing wins, except over an endpoint placeholder: a later pass that lists it says what it is.
        if not key or (key in self._entities and key not in self._endpoint_only):
            return
        self._endpoint_only.discard(key)
        self._entities[key] = EntityMention(
            name=name, type=entity_type, description=description.strip(), chunk_id=self._chunk_id, spotter=SPOTTER
        )

    def as_json(self) -> str:
        """What has been extracted so far, for the gleaning prompt."""
        return json.dumps(
            {
                "entities": [{"name": e.name, "type": e.type} for e in self._entities.values()],
                "relationships": [
                    {"source": r.source, "target": r.target, "type": r.predicate or r.type}
                    for r in self._relations.values()
                ],
            },
            ensure_ascii=False,
        )

    def extraction(self) -> ChunkExtraction:
        return ChunkExtraction(
            chunk_id=self._chunk_id, entities=tuple(self._entities.values()), relations=tuple(self._relations.values())
        )


def _type_key(wording: str) -> str:
    """A relationship wording spelled like a type name (as ``Ontology.relationship_type`` matches it)."""
    return re.sub(r"[^A-Za-z0-9]+", "_", wording).strip("_").upper()


def _weight(strength: float | None) -> float:
    if strength is None:
        return 1.0
    return min(max(strength, 1.0), MAX_STRENGTH) / MAX_STRENGTH
