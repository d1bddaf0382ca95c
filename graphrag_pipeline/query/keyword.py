"""BM25 over chunk texts (with their document's title): the keyword signal, so exact identifiers — an alert name, a
metric, an error string, a service name — find the passages that spell them, whatever the embedding makes of them.

Built in memory from the state store when an index is opened for querying (a sparse term × chunk matrix; one
question is a sum of a few rows), so every backend gets the same signal without a full-text index of its own.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping

import numpy as np

from graphrag_pipeline.query.fusion import normalize_by_max

# Lower-case runs of letters and digits, as most BM25 baselines count them; an identifier such as
# "KubePodCrashLooping" or "payments-api" is kept whole as well as in parts, so the exact spelling scores highest.
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
# Starting only where a word starts: tried inside each word too, it re-read the rest of the word at every letter
# (same matches; building the keyword index of 100k chunks took 8.9 s, now 5.8).
_IDENTIFIER = re.compile(r"(?<![^\W_])[^\W_]+(?:[\-_.][^\W_]+)+", re.UNICODE)
# A word with a capital after a lower-case letter or digit ("KubeAPIDown", "PgBouncer"), and its parts: runs of
# capitals not followed by a lower-case letter ("API"), a capital with its lower-case letters ("Down"), digits.
_CAMEL_WORD = re.compile(r"\b[A-Za-z0-9]*[a-z0-9][A-Z][A-Za-z0-9]*\b")
_CAMEL_PART = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
# Identifiers by their shape: joined by - _ . ("payments-api", "ERR_QUOTA_7"), CamelCase with two humps or more
# ("KubePodCrashLooping"), or a word with digits after a letter ("http2", "s3"; not "1990s" or "3rd").
_IDENTIFIER_SHAPE = re.compile(r"[^\W_]+(?:[_.][^\W_]+)+|[A-Z]?[a-z0-9]+(?:[A-Z][a-z0-9]+){2,}|[^\W\d_]+\d\w*")
# A question's identifier counts this many times its idf: an exact identifier must not lose to a page that merely
# shares more of the question's ordinary words.
IDENTIFIER_BOOST = 3.0
K1 = 1.2
B = 0.75


def terms(text: str) -> list[str]:
    """The terms BM25 counts in a text: its words, its compound identifiers, and the words of its CamelCase names
    ("AlertmanagerFailedToSendAlerts" also counts "failed", "send", "alerts": a runbook titled by its alert's name
    answers a question that describes the alert in words), lower-cased."""
    lowered = text.lower()
    camel_parts = [part.lower() for word in _CAMEL_WORD.findall(text) for part in _CAMEL_PART.findall(word)]
    return _WORD.findall(lowered) + _IDENTIFIER.findall(lowered) + camel_parts


def identifiers(text: str) -> set[str]:
    """The text's terms that are identifiers by their shape (as written: CamelCase shows only before lower-casing)."""
    return {term.lower() for term in _IDENTIFIER_SHAPE.findall(text)}


class KeywordIndex:
    """Okapi BM25 (k1 1.2, b 0.75) over a fixed set of texts."""

    def __init__(self, texts: Iterable[tuple[str, str]], groups: Mapping[str, str] | None = None):
        """``texts``: (item id, text) pairs; ``groups``: item id → the unit it belongs to (a chunk's document), by
        which the identifier signal counts how many places hold an identifier (default: each item its own)."""
        from scipy import sparse  # deferred: importing it costs a query process's start a fifth of a second

        self._groups = groups or {}
        self.item_ids: list[str] = []
        vocabulary: dict[str, int] = {}
        rows: list[int] = []
        columns: list[int] = []
        counts: list[int] = []
        lengths: list[int] = []
        for position, (item_id, text) in enumerate(texts):
            self.item_ids.append(item_id)
            bag = Counter(terms(text))
            lengths.append(sum(bag.values()))
            for term, count in bag.items():
                rows.append(vocabulary.setdefault(term, len(vocabulary)))
                columns.append(position)
                counts.append(count)
        self._vocabulary = vocabulary
        size = len(self.item_ids)
        frequencies = np.asarray(counts, dtype=np.float64)
        length = np.asarray(lengths, dtype=np.float64)
        average = float(length.mean()) if size else 0.0
        column_index = np.asarray(columns, dtype=np.int64)
        norm = K1 * (1 - B + B * length[column_index] / average) if size else np.zeros(0)
        saturated = frequencies * (K1 + 1) / (frequencies + norm)
        document_frequency = np.bincount(np.asarray(rows, dtype=np.int64), minlength=len(vocabulary))
        self._idf = np.log(1 + (size - document_frequency + 0.5) / (document_frequency + 0.5))
        self._weights = sparse.csr_matrix((saturated, (rows, columns)), shape=(len(vocabulary), size))

    def __len__(self) -> int:
        return len(self.item_ids)

    def identifier_matches(self, query: str) -> dict[str, float]:
        """Item → the share of the query's identifiers it holds, each counting 1 / the number of documents (groups)
        that hold it: an exact identifier found in one document is the strongest evidence a question can give, one
        that five documents share says as little about each of them as a fifth of that, and a sub-identifier that
        many share ("well-known", "v1") next to nothing."""
        found = [term for term in identifiers(query) if term in self._vocabulary]
        if not found:
            return {}
        shares: dict[str, float] = {}
        for term in found:
            holders = [self.item_ids[i] for i in self._weights[self._vocabulary[term]].indices]
            evidence = 1.0 / (len(found) * len({self._groups.get(item, item) for item in holders}))
            for item in holders:
                shares[item] = shares.get(item, 0.0) + evidence
        return shares

    def best_match_shares(self, query: str, limit: int) -> dict[str, float]:
        """``scores`` as a share of the best item's: the best is 1."""
        return normalize_by_max(self.scores(query, limit))

    def scores(self, query: str, limit: int) -> dict[str, float]:
        """The ``limit`` best items for a query with their BM25 scores as a share of a perfect match's (in (0, 1))."""
        query_terms = Counter(t for t in terms(query) if t in self._vocabulary)
        if not query_terms or not self.item_ids:
            return {}
        rows = [self._vocabulary[t] for t in query_terms]
        exact = identifiers(query)
        factors = np.asarray([
            self._idf[row] * count * (IDENTIFIER_BOOST if term in exact else 1.0)
            for term, row, count in zip(query_terms, rows, query_terms.values())
        ])
        # A matrix-vector product over the question's rows: the same sums as scaling the rows and adding them up,
        # without building the scaled rows (at 100k chunks, 3 ms a question instead of 6.5).
        totals = self._weights[rows].T @ factors
        # Scaled by a perfect match's score (every query term, saturated), not by the best item's: a weak best match
        # stays weak next to the other signals.
        perfect = float(factors.sum() * (K1 + 1))
        top = np.argpartition(-totals, min(limit, len(totals)) - 1)[:limit]
        return {self.item_ids[i]: float(totals[i] / perfect) for i in top if totals[i] > 0}
