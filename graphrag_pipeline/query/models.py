"""What a query returns. Plain dataclasses with `to_dict` so agents can serialize answers as JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Mode = Literal["vector", "graph", "hybrid", "global"]
MODES: tuple[str, ...] = ("vector", "graph", "hybrid", "global")


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
    vector_score: float
    graph_score: float
    combined_score: float
    hops_from_query: int  # hop count of that entity from the seeds (0: a seed itself or a plain vector hit)
    citations: list[Citation] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class QueryResponse:
    question: str
    mode: str
    results: list[QueryResult]
    entities_mentioned: list[dict[str, Any]]  # entities linked from the question: id, name, type, how linked
    relationships: list[dict[str, Any]]  # subject → predicate → object among the entities behind the results
    fell_back_to_vector: bool  # no entity could be linked, so the answer is plain vector search
    timings_ms: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def doc_ids(self) -> list[str]:
        """Distinct documents in result order (what retrieval metrics score)."""
        return list(dict.fromkeys(r.doc_id for r in self.results))
