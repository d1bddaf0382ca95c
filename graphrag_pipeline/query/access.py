"""What one caller may read, applied as the last step of every answer (like Curiosity's FilterAsUser).

A document either carries no access groups (everyone may read it) or the groups its source granted (Confluence
restrictions, a folder's configuration). A caller holding any of those groups may read it. Everything the index
derived from documents inherits that: a chunk is readable with its document; an entity or relationship is visible
when at least one readable document supports it (its provenance); a community summary only when every document it
was written from is readable, since its text mixes them all.

What a visible entity or relationship *says* follows the same rule part by part: its merged description keeps which
documents state each part (lib.merge), and a reader who may not read all of the element's documents is shown only
the parts, and the predicates, that some document it may read states. A public entity that a restricted document
also describes so shows the public reader the public sentences only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from graphrag_pipeline.lib.core.models import Entity, Relationship
from graphrag_pipeline.lib.stores.state.protocol import StateStore
from graphrag_pipeline.lib.stores.state.sql import WITHDRAWN_GROUP


def reader_access(state: StateStore, groups: Iterable[str]) -> "ReaderAccess":
    """What a caller holding ``groups`` may read, as the index says now (read per question or page, so a revocation
    applies at once)."""
    if isinstance(groups, str):
        raise TypeError("groups must be a collection of group names, not one string")
    return ReaderAccess(state.restricted_documents(), groups)


class ReaderAccess:
    def __init__(self, restricted: Mapping[str, frozenset[str]], groups: Iterable[str]):
        self._restricted = restricted  # doc id -> groups that may read it; absent: readable by everyone
        self._groups = frozenset(groups)

    def can_read(self, doc_id: str) -> bool:
        allowed = self._restricted.get(doc_id)
        return allowed is None or (WITHDRAWN_GROUP not in allowed and not allowed.isdisjoint(self._groups))

    def unreadable(self) -> frozenset[str]:
        """The documents this caller may not read (restricted to other groups, or withdrawn)."""
        return frozenset(doc_id for doc_id in self._restricted if not self.can_read(doc_id))

    def reads_everything(self) -> bool:
        """Whether this caller may read every document of the index."""
        return all(WITHDRAWN_GROUP not in allowed and not allowed.isdisjoint(self._groups)
                   for allowed in self._restricted.values())

    def can_read_any(self, doc_ids: Iterable[str]) -> bool:
        """For what any one supporting document justifies: an entity, a relationship."""
        return any(self.can_read(doc_id) for doc_id in doc_ids)

    def can_read_all(self, doc_ids: Iterable[str]) -> bool:
        """For text written from them: a chunk (its one document), a community summary (every document its
        entities come from, since its text mixes them all)."""
        doc_ids = doc_ids if isinstance(doc_ids, (list, tuple, set, frozenset)) else list(doc_ids)
        # Most documents are restricted to nobody: checked in one C-level pass over what can run to hundreds of ids
        # (an entity of a 100k-chunk corpus), before one by one.
        return self._restricted.keys().isdisjoint(doc_ids) or all(self.can_read(doc_id) for doc_id in doc_ids)

    def description(self, element: Entity | Relationship) -> str:
        """The element's description as this reader may see it: the whole text (which a model may have written from
        every part) when every supporting document is readable, else the parts some readable document states. An
        element read without its parts (``description_parts`` empty: from a graph store) shows nothing then."""
        if self.can_read_all(element.doc_ids):
            return element.description
        return "\n".join(text for text, doc_ids in element.description_parts if self.can_read_any(doc_ids))

    def predicates(self, relationship: Relationship) -> list[str]:
        """The wordings of a relationship that some readable document uses (all when every document is readable;
        none when their provenance is unknown)."""
        if self.can_read_all(relationship.doc_ids):
            return list(relationship.predicates)
        if len(relationship.predicate_doc_ids) != len(relationship.predicates):
            return []
        return [predicate for predicate, doc_ids in zip(relationship.predicates, relationship.predicate_doc_ids)
                if self.can_read_any(doc_ids)]
