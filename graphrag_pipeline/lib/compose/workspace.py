"""A workspace bundles what the stages need: settings, the state store, the graph and vector stores, the embedder
and the extractor. Stores come from the backend factory (`lib/compose/backends.py`, which also documents the index
layout) as the settings choose them; tests inject instances or factories instead.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from functools import cached_property
from pathlib import Path
from typing import Callable, Sequence, TypeVar

from graphrag_pipeline.lib.compose import backends
from graphrag_pipeline.lib.core.config import PipelineSettings
from graphrag_pipeline.lib.core.ids import content_hash, is_plain_word
from graphrag_pipeline.lib.core.models import Chunk, ChunkExtraction, EntityMention, Quarantined, RelationMention
from graphrag_pipeline.lib.core.progress import ProgressListener, StepProgress
from graphrag_pipeline.lib.llm.accounting import RunLedger, Usage
from graphrag_pipeline.lib.stores.protocols import Embedder, GraphStore, VectorStore
from graphrag_pipeline.lib.stores.state.protocol import StateStore
from graphrag_pipeline.lib.stores.state.sql import SOURCE_EXTRACTION_PAYLOADS

T = TypeVar("T")
Provided = T | Callable[[], T] | None  # an instance, a factory called on first use, or None for the configured one

# Bump when the offline extractor's behaviour changes, so cached extractions are redone. 2: a title's trailing
# qualifier in parentheses is not part of the name it gives.
EXTRACTOR_VERSION = "2"


def llm_usage(settings: PipelineSettings, run_id: str | None = None) -> Usage:
    """A fresh account of one stage's model calls, priced and capped by the configuration; with a run id and a
    budget, the cap covers every stage of that run (the spend is shared through ``llm_runs.sqlite``)."""
    ledger = None
    if run_id is not None and settings.llm.budget_usd is not None:
        Path(settings.index_dir).mkdir(parents=True, exist_ok=True)
        ledger = RunLedger(backends.llm_runs_path(settings), run_id)
    return Usage(settings.llm.prices, settings.llm.budget_usd, ledger)


class Workspace:
    def __init__(
        self,
        settings: PipelineSettings,
        *,
        state: Provided[StateStore] = None,
        graph_store: Provided[GraphStore] = None,
        vector_store: Provided[VectorStore] = None,
        published_vectors: Provided[VectorStore] = None,
        embedder: Provided[Embedder] = None,
        usage: Usage | None = None,
        progress_listeners: Sequence[ProgressListener] = (),
    ):
        self.settings = settings
        self.progress_listeners = list(progress_listeners)  # who watches long steps: a run's log, a terminal bar
        self.usage = usage or llm_usage(settings)  # every LLM and HTTP-embedder call of this workspace
        self.index_dir = Path(settings.index_dir)
        self._state = state
        self._graph_store = graph_store
        self._vector_store = vector_store
        self._published_vectors = published_vectors
        self._embedder = embedder

    def progress(self, stage: str, step: str, total: int) -> StepProgress:
        """A counter for one long step of a stage, reported to this workspace's progress listeners."""
        return StepProgress(stage, step, total, self.progress_listeners)

    @cached_property
    def state(self) -> StateStore:
        if self._state is not None:
            return _resolve(self._state)
        return backends.open_state(self.settings)

    @cached_property
    def graph_store(self) -> GraphStore:
        if self._graph_store is not None:
            return _resolve(self._graph_store)
        return backends.open_graph_store(self.settings)

    @cached_property
    def vector_store(self) -> VectorStore:
        if self._vector_store is not None:
            return _resolve(self._vector_store)
        return backends.open_vector_store(self.settings)

    @cached_property
    def published_vectors(self) -> VectorStore:
        """The vector collections as queries see them: the published version (a server has only one view)."""
        if self._published_vectors is not None:
            return _resolve(self._published_vectors)
        return backends.open_vector_store(self.settings, reader=True)

    @cached_property
    def embedder(self) -> Embedder:
        if self._embedder is not None:
            return _resolve(self._embedder)
        from graphrag_pipeline.lib.embed.embedders import configured_embedder

        return configured_embedder(self.settings, query=False, usage=self.usage)

    @cached_property
    def embedding_dimension(self) -> int:
        """The embedder's dimension, read from the embedding cache when it has vectors of this model: a remote
        embedder would otherwise be asked once per stage, and a re-run of unchanged content must make no call."""
        return self.state.cached_embedding_dimension(self.embedder.name) or self.embedder.dimension

    @property
    def tokenizer(self):
        """Token spans in the embedder's own vocabulary, so chunk sizes are what the model will really see; an HTTP
        embedder's vocabulary is not ours to read, so chunks are measured in words and punctuation there (such
        models take thousands of tokens, far more than a chunk of a few hundred words becomes)."""
        if hasattr(self.embedder, "encode_offsets"):
            return self.embedder
        from graphrag_pipeline.lib.algorithms.chunking import WordTokenizer

        return WordTokenizer()

    @cached_property
    def extractor_key(self) -> str:
        """Stored extractions are keyed by this: any change to what the extractor would produce changes it."""
        config = self.settings.extraction
        if config.extractor == "precomputed":
            return "precomputed"
        if config.extractor == "llm":
            return f"llm-{self._llm_extractor.version}"
        names = json.dumps(sorted(self.catalog_names.items()))
        return f"{self.extractor_family}+catalog-{content_hash(names)[:12]}" if self.catalog_names else self.extractor_family

    @cached_property
    def extractor_family(self) -> str:
        """The extractor key without the catalog's names: extractions of one family differ only in which catalog
        names they spotted, so an older one still stands for its chunk until the chunk is extracted again."""
        config = self.settings.extraction
        if config.extractor in ("precomputed", "llm"):
            return self.extractor_key
        # How many processes run NER does not change what it finds (and left out, keys of earlier builds stand).
        fingerprint = config.model_dump_json(exclude={"ner_processes"}) + self.settings.ontology.model_dump_json()
        key = f"offline-v{EXTRACTOR_VERSION}-{content_hash(fingerprint)[:16]}"
        return f"hybrid-{key}-{self._llm_extractor.version}" if config.extractor == "hybrid" else key

    def catalog_records(self) -> list[dict]:
        """The extraction records of every catalog source's documents (their entities, names and facts)."""
        doc_ids = [doc_id for source in self.settings.sources if source.kind == "catalog"
                   for doc_id in self.state.document_hashes(source=source.name)]
        return list(self.state.payloads(SOURCE_EXTRACTION_PAYLOADS, doc_ids).values()) if doc_ids else []

    @cached_property
    def catalog_names(self) -> dict[str, str]:
        """Name → ontology type of the catalog entities, as the offline spotters look for them in text: every name
        but the plain words ("cart" is mostly just a word; "Cart Service" and "product-catalog" are names)."""
        from graphrag_pipeline.lib.sources.catalog import catalog_typed_names

        return {name: entity_type for name, entity_type in catalog_typed_names(self.catalog_records()).items()
                if not is_plain_word(name)}

    @cached_property
    def llm(self):
        """The configured chat model behind the persistent completion cache, counting into ``usage``."""
        from graphrag_pipeline.lib.llm.runner import llm_runner

        self.index_dir.mkdir(parents=True, exist_ok=True)
        return llm_runner(self.settings.llm, backends.llm_cache_path(self.settings), usage=self.usage)

    @cached_property
    def _offline_extractor(self):
        from graphrag_pipeline.lib.extract.offline import OfflineExtractor

        return OfflineExtractor(self.settings.extraction, self.settings.ontology, known_names=self.catalog_names)

    @cached_property
    def _llm_extractor(self):
        from graphrag_pipeline.lib.extract.llm import LLMExtractor

        return LLMExtractor(self.llm, self.settings.ontology, max_gleanings=self.settings.extraction.max_gleanings)

    def extract(self, chunks: Sequence[Chunk]) -> tuple[list[ChunkExtraction], list[Quarantined]]:
        """Chunks of catalog documents get the catalog's exact typed facts; all others the configured extractor."""
        from graphrag_pipeline.lib.sources.catalog import extract_with_catalogs

        records = self.state.payloads(SOURCE_EXTRACTION_PAYLOADS, {c.doc_id for c in chunks})
        return extract_with_catalogs(chunks, records, self.settings.ontology, self._extract_text)

    def _extract_text(self, chunks: Sequence[Chunk]) -> tuple[list[ChunkExtraction], list[Quarantined]]:
        extractor = self.settings.extraction.extractor
        if extractor == "precomputed":
            from graphrag_pipeline.lib.extract.offline import precomputed_extractions

            records = self.state.payloads(SOURCE_EXTRACTION_PAYLOADS, {c.doc_id for c in chunks})
            result = precomputed_extractions(chunks, records, self.settings.ontology)
            return list(result.extractions), list(result.quarantined)
        titles = self.state.document_titles({c.doc_id for c in chunks})
        if extractor == "offline":
            return self._offline_extractor.extract(chunks, titles), []
        extracted, quarantined = self._llm_extractor.extract(chunks, titles)
        if extractor == "llm":
            return extracted, quarantined
        # hybrid: the spotters' entities (dictionary, patterns, NER) and the model's, per chunk. A chunk the model
        # could not read keeps its spotter extraction, and its quarantine record says what the model did wrong.
        by_model = {e.chunk_id: e for e in extracted}
        return [
            combine_extractions(spotted, by_model.get(spotted.chunk_id))
            for spotted in self._offline_extractor.extract(chunks, titles)
        ], quarantined

    def close(self) -> None:
        for name in ("graph_store", "vector_store", "published_vectors", "state", "llm", "_offline_extractor"):
            if name in self.__dict__:
                self.__dict__[name].close()
        if "embedder" in self.__dict__ and hasattr(self.embedder, "close"):
            self.embedder.close()  # an HTTP embedder's connection pool
        if self.usage.ledger is not None:
            self.usage.ledger.close()

    def __enter__(self) -> "Workspace":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def combine_extractions(spotted: ChunkExtraction, by_model: ChunkExtraction | None) -> ChunkExtraction:
    """One chunk's spotter and model extractions together. A name both found keeps the spotter's name and type when
    the spotter matched the configured dictionary or patterns (the user's own vocabulary, with the model's
    description), else takes the model's mention."""
    if by_model is None:
        return spotted
    from graphrag_pipeline.lib.core.ids import normalize_name

    trusted = {normalize_name(e.name): e for e in spotted.entities if e.spotter in ("dictionary", "pattern")}
    entities: dict[str, EntityMention] = {normalize_name(e.name): e for e in spotted.entities}
    for mention in by_model.entities:
        key = normalize_name(mention.name)
        if key not in trusted:
            entities[key] = mention
        elif mention.description:  # the user's type, the model's words about it
            entities[key] = dataclasses.replace(trusted[key], description=mention.description)
    relations: dict[tuple[str, str, str], RelationMention] = {}
    for relation in (*spotted.relations, *by_model.relations):
        relations[(normalize_name(relation.source), normalize_name(relation.target), relation.type)] = relation
    return ChunkExtraction(spotted.chunk_id, tuple(entities.values()), tuple(relations.values()))


def _resolve(provided):
    return provided() if inspect.isfunction(provided) else provided
