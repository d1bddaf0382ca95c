"""The signals a result is ranked by, declared once: each one's name in a result's ``scores``, where retrieval keeps
it, the setting that weighs it in hybrid fusion, and what it measures. A new signal is one entry here, the code
that computes it (``query/retrievers.py``) and its weight in ``RetrievalConfig``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from graphrag_pipeline.lib.core.config import RetrievalConfig

if TYPE_CHECKING:
    from graphrag_pipeline.query.retrievers import Retrieval


@dataclass(frozen=True)
class Signal:
    name: str  # its key in QueryResult.scores and in fusion
    attribute: str  # the Retrieval field holding candidate id -> score
    weight_setting: str  # the RetrievalConfig field weighing it in hybrid fusion
    meaning: str
    floored: bool = False  # a candidate without a score has the retrieval's vector floor, not 0

    def scores(self, retrieval: Retrieval, candidate_ids: Iterable[str]) -> dict[str, float]:
        """Candidate id -> its score of this signal, for every candidate asked about."""
        default = retrieval.vector_floor if self.floored else 0.0
        held = getattr(retrieval, self.attribute)
        return {candidate_id: held.get(candidate_id, default) for candidate_id in candidate_ids}


SIGNALS: tuple[Signal, ...] = (
    Signal("vector", "vector_scores", "vector_weight", "cosine similarity of the passage to the question",
           floored=True),
    Signal("graph", "graph_scores", "graph_weight",
           "activation the walk from the question's entities brought to an entity the passage mentions"),
    Signal("keyword", "keyword_scores", "keyword_weight", "BM25, as a share of the question's best match"),
    Signal("identifier", "identifier_scores", "identifier_weight",
           "the rarity-weighted share of the question's identifiers the passage holds"),
    Signal("relation", "relation_scores", "relation_weight",
           "1: about an entity an asked-for relationship reached (a catalog page 0.2)"),
)


def signal_weights(config: RetrievalConfig) -> dict[str, float]:
    """Signal name -> its weight in hybrid fusion."""
    return {signal.name: getattr(config, signal.weight_setting) for signal in SIGNALS}


def signal_scores(retrieval: Retrieval, candidate_id: str) -> dict[str, float]:
    """Signal name -> one candidate's score, rounded as results show it."""
    return {signal.name: round(signal.scores(retrieval, (candidate_id,))[candidate_id], 6) for signal in SIGNALS}
