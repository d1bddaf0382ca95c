"""Which entities each document is about, from evidence that holds whatever a corpus's conventions are.

A document is about an entity, with a strength in (0, 1], when:

* its title names the entity once the configured generic head words are set aside ("Vault Service", "Runbook:
  vault" and "vault" are all about ``vault``): 1;
* a segment of its path names the entity (``vault/README.md``, ``runbooks/vault.md``): as strong as the segment is
  rare among the documents' paths (1 / (1 + log10(documents whose path has it))), so the file's own name or folder
  says much and a folder shared by a hundred documents (``kubernetes/``) little;
* a catalog links it to the entity: a ``HAS_RUNBOOK`` or ``DOCUMENTED_IN`` edge whose target is a URL or path that
  ends like the document's path (``linked_document``) makes the document about the target and the edge's source: 1
  when one link names it, less when many do (1 / (1 + log10(links))), as a shared folder says less.

A catalog's entities are also matched by their short names: the words most of one catalog's names of one type
share ("argocd-" on every Argo CD workload, "-server" on half) set aside on both sides, so ``argocd-repo-server`` is
what a section titled "Repo Server" or a file ``dex.md`` is about (``catalog_short_names``).

A catalog entity whose name holds a document's title or file name among other words is an instance of what that
document describes: ``thanos-store-shard-0`` and ``payments-api-canary`` are deployments of the components
documented as "Store" and ``payments-api.md`` (``instance_names``). That is weaker evidence (0.5, less when several
documents carry that title) and never counts the catalog's own pages, whose titles are entity names.

Titles are the weakest convention (a catalog's ``checkout`` and a README's "Checkout Service"); paths and links
survive the corpora where titles fail. Built once per open index and shared by the relation signal, the graph
scores and exploration (``QueryEngine.documents_about``).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Container, Iterable, Mapping
from urllib.parse import unquote, urlsplit

from graphrag_pipeline.lib.core.ids import normalize_name, subject_key, without_edge_words

# The catalog edges whose target is a document: a runbook or a page, named by its URL or path.
LINK_RELATIONSHIP_TYPES = frozenset({"HAS_RUNBOOK", "DOCUMENTED_IN"})
LINK_STRENGTH = 1.0
TITLE_STRENGTH = 1.0
# A link target names a document when its path ends with the document's, of at least this many segments ("vault.md"
# alone is too common a file name to decide which page a URL means, unless no other document has it).
MIN_LINK_SEGMENTS = 2
# A title that holds a catalog name among other words ("LedgerDBDown": the ledger-db runbook) is about it, less surely
# than one that is the name; only names of two words or more count (one word, "alert", is in too many titles).
CONTAINED_STRENGTH = 0.5
CONTAINED_MIN_WORDS = 2
CONTAINED_MAX_WORDS = 5
# A catalog name that holds a document's title among other words names an instance of what the document describes.
INSTANCE_STRENGTH = 0.5
# A word is a catalog's shared word when at least half of its names, and three or more, have it.
SHARED_NAME_SHARE = 0.5
MIN_SHARED_NAMES = 3
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


def linked_document(keys: list[str], candidates: list[str], segments_of: Mapping[str, list[str]]) -> list[str]:
    """The document a link's path keys name, among the ``candidates`` of its file name: the one whose path ends like
    the link's for the most segments, at least ``MIN_LINK_SEGMENTS`` of them (a link is written where the runbook is
    published, ``runbooks.example.dev/runbooks/kubernetes/podcrashlooping/``, a corpus mounts the same file
    elsewhere, ``ops-runbooks/kubernetes/PodCrashLooping.md``), or the only document of that file name when its whole
    path is that name. A tie names none: a link means one page."""
    def shared(doc_id: str) -> int:
        doc_keys = segments_of[doc_id]
        count = 0
        while count < min(len(doc_keys), len(keys)) and doc_keys[-1 - count] == keys[-1 - count]:
            count += 1
        return count

    scored = sorted(((shared(doc_id), doc_id) for doc_id in candidates), reverse=True)
    if not scored or (len(scored) > 1 and scored[1][0] == scored[0][0]):
        return []
    best, doc_id = scored[0]
    whole_path = best == len(segments_of[doc_id])  # "vault.md" at the corpus's root, the only one of that name
    return [doc_id] if best >= MIN_LINK_SEGMENTS or (whole_path and len(scored) == 1) else []


def _compact(key: str) -> str:
    return re.sub(r"[^0-9a-z]", "", key)


def _words(key: str) -> list[str]:
    return re.findall(r"[0-9a-z]+", key)


def contained_names(title: str, ids_by_compact: Mapping[str, Iterable[str]]) -> set[str]:
    """The catalog entities whose name of two words or more a title holds among other words ("LedgerDBDown" holds
    ``ledger-db``), spelled without separators on both sides; a name that lies inside a longer one the title holds
    does not count ("Payments API Gateway Down" is about ``payments-api-gateway``, not also ``payments-api``)."""
    if not ids_by_compact:
        return set()
    words = _words(normalize_name(title))
    spans = [(start, end) for start in range(len(words))
             for end in range(start + CONTAINED_MIN_WORDS, min(len(words), start + CONTAINED_MAX_WORDS) + 1)
             if _compact("".join(words[start:end])) in ids_by_compact]
    longest = [(s, e) for s, e in spans if not any(s2 <= s and e <= e2 and (s2, e2) != (s, e) for s2, e2 in spans)]
    found: set[str] = set()
    for start, end in longest:
        if (start, end) != (0, len(words)):  # the whole title is the equality above, at full strength
            found.update(ids_by_compact["".join(words[start:end])])
    return found


def instance_names(name: str, titles: Container[str], ignored: frozenset[str]) -> set[str]:
    """The ``titles`` (compact titles or file names of documents) that a catalog name holds among other words
    (``thanos-store-shard-0`` holds "store"): the longest such spans only ("queryfrontend", not also "query", in
    ``thanos-query-frontend``), and never a span made only of ``ignored`` words (the words a catalog's names share,
    generic head words)."""
    words = _words(normalize_name(name))
    spans = [(start, end) for start in range(len(words)) for end in range(start + 1, len(words) + 1)
             if (start, end) != (0, len(words)) and "".join(words[start:end]) in titles
             and not set(words[start:end]) <= ignored]
    return {"".join(words[start:end]) for start, end in spans
            if not any(s2 <= start and end <= e2 and (s2, e2) != (start, end) for s2, e2 in spans)}


def catalog_short_names(names: Iterable[str]) -> tuple[dict[str, str], frozenset[str]]:
    """The words most of one catalog's names share (every Argo CD workload is ``argocd-…``, half are ``…-server``),
    and each name without them at its edges, spelled without separators (``argocd-repo-server`` → ``repo``): how
    its documentation calls it ("Repo Server"). Only names that lose such a word get a short name."""
    words_of = {name: _words(normalize_name(name)) for name in names}
    counts = Counter(word for words in words_of.values() for word in set(words))
    common = frozenset(word for word, count in counts.items()
                       if count >= max(MIN_SHARED_NAMES, SHARED_NAME_SHARE * len(words_of)))
    short = {}
    for name, words in words_of.items():
        kept = without_edge_words(" ".join(words), common)
        if kept and kept != " ".join(words):
            short[name] = _compact(kept)
    return short, common


class Aboutness:
    """Entity → the documents about it, with the strength of the evidence (see the module docstring)."""

    def __init__(
        self,
        documents: Iterable[tuple[str, str]],
        ids_by_name: Mapping[str, Iterable[str]],
        head_words: Iterable[str],
        links: Iterable[tuple[str, Iterable[str]]] = (),
        catalogs: Iterable[Mapping[str, Iterable[str]]] = (),
        catalog_pages: Iterable[str] = (),
    ):
        """``documents``: (doc id, title); ``ids_by_name``: name key → entity ids; ``links``: (link target as
        written, the entities a document at that target is about: the target's entity and the edge's source);
        ``catalogs``: per catalog, its entity names → their ids (``catalog_short_names``); ``catalog_pages``: the
        documents that are a catalog's own entries."""
        head = frozenset(normalize_name(word) for word in head_words)
        documents = list(documents)
        segments_of = {doc_id: path_segments(doc_id, head) for doc_id, _ in documents}
        spread = Counter(key for keys in segments_of.values() for key in set(keys))
        # Short names of catalog entities, and the words set aside to read a title or a path segment as one.
        catalogs = list(catalogs)
        shared: set[str] = set()
        ids_by_short: dict[str, set[str]] = {}
        ids_by_compact: dict[str, set[str]] = {}  # a catalog name of two words or more, spelled without separators
        for catalog in catalogs:
            short, common = catalog_short_names(catalog)
            shared |= common
            for name, key in short.items():
                ids_by_short.setdefault(key, set()).update(catalog[name])
            for name, ids in catalog.items():
                if len(_words(normalize_name(name))) >= CONTAINED_MIN_WORDS:
                    ids_by_compact.setdefault(_compact(normalize_name(name)), set()).update(ids)
        shared_words = frozenset(shared)

        def short_ids(key: str) -> Iterable[str]:
            return ids_by_short.get(_compact(without_edge_words(" ".join(_words(key)), shared_words)), ()) \
                if ids_by_short else ()

        self._of_entity: dict[str, dict[str, float]] = {}
        for doc_id, title in documents:
            for key in title_subjects(title, head):
                for entity_id in [*ids_by_name.get(key, ()), *short_ids(key)]:
                    self._add(entity_id, doc_id, TITLE_STRENGTH)
            for entity_id in contained_names(title, ids_by_compact):
                self._add(entity_id, doc_id, CONTAINED_STRENGTH)
            for key in segments_of[doc_id]:
                strength = 1.0 / (1.0 + math.log10(spread[key]))
                for entity_id in [*ids_by_name.get(key, ()), *short_ids(key)]:
                    self._add(entity_id, doc_id, strength)
        self._add_instances(documents, segments_of, catalogs, frozenset(catalog_pages), shared_words | head)
        # Links are matched on segments spelled without separators: a URL writes the runbook of KubePodCrashLooping
        # as ".../kubepodcrashlooping/", the corpus's file is "KubePodCrashLooping.md" (keyed "kube pod crash looping").
        compact_of = {doc_id: [_compact(key) for key in keys] for doc_id, keys in segments_of.items()}
        by_name: dict[str, list[str]] = {}  # a document's own (last) segment -> the documents
        for doc_id, keys in compact_of.items():
            if keys:
                by_name.setdefault(keys[-1], []).append(doc_id)
        linked: dict[str, list[list[str]]] = {}  # doc id -> the entities of each link that names it
        for target, entity_ids in links:
            keys = [_compact(key) for key in link_segments(target, head)]
            for doc_id in linked_document(keys, by_name.get(keys[-1], []) if keys else [], compact_of):
                linked.setdefault(doc_id, []).append(list(entity_ids))
        for doc_id, entity_lists in linked.items():
            # A runbook the catalog links to every service (the pod crash-loop runbook) is about each of them in part,
            # as a folder shared by many documents is.
            strength = LINK_STRENGTH / (1.0 + math.log10(len(entity_lists)))
            for entity_ids in entity_lists:
                for entity_id in entity_ids:
                    self._add(entity_id, doc_id, strength)

    def _add_instances(self, documents: list[tuple[str, str]], segments_of: Mapping[str, list[str]],
                       catalogs: list[Mapping[str, Iterable[str]]], catalog_pages: frozenset[str],
                       ignored: frozenset[str]) -> None:
        """Each catalog entity is, in part, about the documents whose title or file name its name holds among other
        words (``instance_names``): the less, the more documents carry that title."""
        docs_by_title: dict[str, set[str]] = {}
        for doc_id, title in documents:
            if doc_id in catalog_pages:
                continue
            keys = {key for key in title_subjects(title, ignored) if len(_words(key)) <= CONTAINED_MAX_WORDS}
            for key in {*keys, *segments_of[doc_id][-1:]}:
                if _compact(key):
                    docs_by_title.setdefault(_compact(key), set()).add(doc_id)
        for catalog in catalogs:
            for name, entity_ids in catalog.items():
                for title in instance_names(name, docs_by_title, ignored):
                    strength = INSTANCE_STRENGTH / (1.0 + math.log10(len(docs_by_title[title])))
                    for doc_id in docs_by_title[title]:
                        for entity_id in entity_ids:
                            self._add(entity_id, doc_id, strength)

    def _add(self, entity_id: str, doc_id: str, strength: float) -> None:
        documents = self._of_entity.setdefault(entity_id, {})
        if strength > documents.get(doc_id, 0.0):
            documents[doc_id] = strength

    def documents_about(self, entity_id: str) -> dict[str, float]:
        """Doc id → how strongly it is about the entity (absent: not about it)."""
        return self._of_entity.get(entity_id, {})

    def strength(self, doc_id: str, entity_id: str) -> float:
        return self._of_entity.get(entity_id, {}).get(doc_id, 0.0)
