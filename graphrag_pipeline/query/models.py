"""What a query takes and returns. Plain dataclasses with `to_dict` so agents can serialize answers as JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from graphrag_pipeline.lib.core.query_options import (  # noqa: F401  (the query module's names for them)
    FUSIONS,
    GRANULARITIES,
    MAX_HOPS,
    MODES,
    Fusion,
    Granularity,
    Mode,
)


@dataclass(frozen=True)
class QueryParameters:
    """How one question is answered, checked on construction (the engine fills what the caller left unset from the
    configuration)."""

    mode: Mode
    top_k: int
    max_hops: int
    fusion: Fusion
    results: Granularity = "documents"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}; not {self.mode!r}")
        if not isinstance(self.top_k, int) or self.top_k < 1:
            raise ValueError(f"top_k must be a whole number of at least 1, not {self.top_k!r}")
        if not isinstance(self.max_hops, int) or not 0 <= self.max_hops <= MAX_HOPS:
            raise ValueError(f"max_hops must be between 0 and {MAX_HOPS}, not {self.max_hops!r}")
        if self.fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {', '.join(FUSIONS)}; not {self.fusion!r}")
        if self.results not in GRANULARITIES:
            raise ValueError(f"results must be one of {', '.join(GRANULARITIES)}; not {self.results!r}")


@dataclass(frozen=True)
class Citation:
    doc_id: str
    chunk_id: str
    title: str
    uri: str


@dataclass(frozen=True)
class QueryResult:
    chunk_id: str  # for global mode: the community id
    text: str
    doc_id: str
    source: dict[str, Any]  # source name, uri, title and the document's metadata
    entity_path: list[str]  # entity names from a seed entity to the entity that brought this chunk in
    combined_score: float  # what the mode ranks by: for hybrid, the signals fused
    hops_from_query: int  # hop count of that entity from the seeds (0: a seed itself or a plain vector hit)
    # Signal name -> this result's score (query/signals.py says what each measures): vector, graph, keyword,
    # identifier, relation.
    scores: dict[str, float] = field(default_factory=dict)
    # The passages behind the result: with document results, the document's best passages (the text is the first).
    citations: list[Citation] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LinkedEntity:
    """An entity the question names, and how it was recognized."""

    id: str
    name: str
    type: str
    linked_by: str  # "name:<the question's words that named it>" or "embedding" (the entities collection)
    confidence: float  # 1 for a name; the cosine for an embedding match


@dataclass(frozen=True)
class Fact:
    """A relationship among the entities behind an answer: source -[type]-> target."""

    source: str  # entity name
    type: str  # the ontology's relationship type
    target: str
    predicates: list[str]  # how the documents phrased it
    weight: float
    doc_ids: list[str]  # up to 10 documents stating it that the caller may read
    followed: bool = False  # the question asked for this relationship (from its source or to its target)
    # Which step of the question asked for it: 1, or 2 for "who owns them" after "which services depend on X"; 0
    # when not followed.
    step: int = 0
    # The systems the ends' catalog entries name ("" when none does): which one a name two systems share means.
    source_system: str = ""
    target_system: str = ""


@dataclass(frozen=True)
class QueryResponse:
    question: str
    mode: Mode
    results: list[QueryResult]
    entities_mentioned: list[LinkedEntity]  # entities linked from the question
    relationships: list[Fact]  # the followed relationships first, then the others among the entities behind results
    fell_back_to_vector: bool  # no entity could be linked, so the answer is plain vector search
    timings_ms: dict[str, float] = field(default_factory=dict)
    # Source changes are recorded that the index has not finished taking in (a build is writing them, or stopped
    # early): this answer may miss them, or still show what they removed.
    index_updating: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def doc_ids(self) -> list[str]:
        """Distinct documents in result order (what retrieval metrics score)."""
        return list(dict.fromkeys(r.doc_id for r in self.results))
