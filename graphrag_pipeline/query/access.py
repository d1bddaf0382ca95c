"""What one caller may read, applied as the last step of every answer (like Curiosity's FilterAsUser).

A document either carries no access groups (everyone may read it) or the groups its source granted (Confluence
restrictions, a folder's configuration). A caller holding any of those groups may read it. Everything the index
derived from documents inherits that: a chunk is readable with its document; an entity or relationship is visible
when at least one readable document supports it (its provenance); a community summary only when every document it
was written from is readable, since its text mixes them all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


class ReaderAccess:
    def __init__(self, restricted: Mapping[str, frozenset[str]], groups: Iterable[str]):
        self._restricted = restricted  # doc id -> groups that may read it; absent: readable by everyone
        self._groups = frozenset(groups)

    def can_read(self, doc_id: str) -> bool:
        allowed = self._restricted.get(doc_id)
        return allowed is None or not allowed.isdisjoint(self._groups)

    def can_read_any(self, doc_ids: Iterable[str]) -> bool:
        """For what any one supporting document justifies: an entity, a relationship."""
        return any(self.can_read(doc_id) for doc_id in doc_ids)

    def can_read_all(self, doc_ids: Iterable[str]) -> bool:
        """For text written from them: a chunk (its one document), a community summary (every document its
        entities come from, since its text mixes them all)."""
        return all(self.can_read(doc_id) for doc_id in doc_ids)
