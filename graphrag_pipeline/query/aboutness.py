"""Which entities each document is about, from evidence that holds whatever a corpus's conventions are.

A document is about an entity, with a strength in (0, 1], when:

* its title names the entity once the configured generic head words are set aside ("Vault Service", "Runbook:
  vault" and "vault" are all about ``vault``): 1;
* a segment of its path names the entity (``vault/README.md``, ``runbooks/vault.md``): as strong as the segment is
  rare among the documents' paths (1 / (1 + log10(documents whose path has it))), so the file's own name or folder
  says much and a folder shared by a hundred documents (``kubernetes/``) little;
* a catalog links it to the entity: a ``HAS_RUNBOOK`` or ``DOCUMENTED_IN`` edge whose target is named by a URL or
  path ending in the document's path makes the document about the target and the edge's source: 1.

Titles are the weakest convention (a catalog's ``checkout`` and a README's "Checkout Service"); paths and links
survive the corpora where titles fail. Built once per open index and shared by the relation signal, the graph
scores and exploration (``QueryEngine.documents_about``).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from urllib.parse import unquote, urlsplit

from graphrag_pipeline.lib.ids import normalize_name, subject_key, without_edge_words

# The catalog edges whose target is a document: a runbook or a page, named by its URL or path.
LINK_RELATIONSHIP_TYPES = frozenset({"HAS_RUNBOOK", "DOCUMENTED_IN"})
LINK_STRENGTH = 1.0
TITLE_STRENGTH = 1.0
# A link target names a document when its path ends with the document's, of at least this many segments ("vault.md"
# alone is too common a file name to decide which page a URL means, unless no other document has it).
MIN_LINK_SEGMENTS = 2
_SEPARATORS = re.compile(r"\s*[:|/\u2013\u2014]\s*|\s+-\s+")
_EXTENSION = re.compile(r"\.(?:md|markdown|mdx|rst|txt|html?|adoc|asciidoc|ya?ml)$", re.IGNORECASE)


def title_subjects(title: str, head_words: frozenset[str]) -> set[str]:
    """The name keys a title can mean: the title itself, and each part of it (split at ":" "|" "/" " - ") with the
    generic head words at its edges dropped ("Vault Service" → "vault service", "vault")."""
    keys = {subject_key(title)} | {without_edge_words(normalize_name(part), head_words)
                                   for part in [title, *_SEPARATORS.split(title)]}
    keys.discard("")
    return keys


def path_segments(doc_id: str, head_words: frozenset[str]) -> list[str]:
    """The name keys of a document's path, outermost first: its id after the source name, split at "/" and "#",
    extensions dropped, generic segments (``README``, ``docs``, ``index``) left out."""
    path = doc_id.split(":", 1)[1] if ":" in doc_id and "/" not in doc_id.split(":", 1)[0] else doc_id
    segments = []
    for raw in re.split(r"[/#]", path):
        key = normalize_name(_EXTENSION.sub("", unquote(raw)).replace("_", " "))
        if key and key not in head_words:
            segments.append(key)
    return segments


def link_segments(target: str, head_words: frozenset[str]) -> list[str]:
    """The path segments of a link target (a URL or a path), keyed as ``path_segments`` keys a document's."""
    parts = urlsplit(target.strip())
    path = parts.path if parts.scheme or parts.netloc else target.split("#", 1)[0]
    return path_segments(path + (f"#{parts.fragment}" if parts.fragment else ""), head_words)


class Aboutness:
    """Entity → the documents about it, with the strength of the evidence (see the module docstring)."""

    def __init__(
        self,
        documents: Iterable[tuple[str, str]],
        ids_by_name: Mapping[str, Iterable[str]],
        head_words: Iterable[str],
        links: Iterable[tuple[str, Iterable[str]]] = (),
    ):
        """``documents``: (doc id, title); ``ids_by_name``: name key → entity ids; ``links``: (link target as
        written, the entities a document at that target is about: the target's entity and the edge's source)."""
        head = frozenset(normalize_name(word) for word in head_words)
        documents = list(documents)
        segments_of = {doc_id: path_segments(doc_id, head) for doc_id, _ in documents}
        spread = Counter(key for keys in segments_of.values() for key in set(keys))
        self._of_entity: dict[str, dict[str, float]] = {}
        for doc_id, title in documents:
            for key in title_subjects(title, head):
                for entity_id in ids_by_name.get(key, ()):
                    self._add(entity_id, doc_id, TITLE_STRENGTH)
            for key in segments_of[doc_id]:
                strength = 1.0 / (1.0 + math.log10(spread[key]))
                for entity_id in ids_by_name.get(key, ()):
                    self._add(entity_id, doc_id, strength)
        by_name: dict[str, list[str]] = {}  # a document's own (last) segment -> the documents
        for doc_id, keys in segments_of.items():
            if keys:
                by_name.setdefault(keys[-1], []).append(doc_id)
        for target, entity_ids in links:
            keys = link_segments(target, head)
            named = by_name.get(keys[-1], []) if keys else []
            entity_ids = list(entity_ids)
            for doc_id in named:
                doc_keys = segments_of[doc_id]
                # The link's path ends with the document's; a bare file name ("vault.md") names it only when no other
                # document has that name.
                if doc_keys == keys[-len(doc_keys):] and (len(doc_keys) >= MIN_LINK_SEGMENTS or len(named) == 1):
                    for entity_id in entity_ids:
                        self._add(entity_id, doc_id, LINK_STRENGTH)

    def _add(self, entity_id: str, doc_id: str, strength: float) -> None:
        documents = self._of_entity.setdefault(entity_id, {})
        if strength > documents.get(doc_id, 0.0):
            documents[doc_id] = strength

    def documents_about(self, entity_id: str) -> dict[str, float]:
        """Doc id → how strongly it is about the entity (absent: not about it)."""
        return self._of_entity.get(entity_id, {})

    def strength(self, doc_id: str, entity_id: str) -> float:
        return self._of_entity.get(entity_id, {}).get(doc_id, 0.0)
