"""Question → entity linking by exact n-gram match against every entity name and alias, with a confidence.

Cheap (a dictionary probe per n-gram) and precise; the embedding match over the entities collection complements it
for paraphrases. A name that is an ordinary word ("Job", "Complete", "package") names an entity only weakly: the
question may just be using the word. Such a link gets ``GENERIC_NAME_CONFIDENCE``, and everything the graph derives
from it is bounded by that.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from wordfreq import zipf_frequency

from graphrag_pipeline.lib.core.ids import is_plain_word, key_variants, normalize_name, without_edge_words
from graphrag_pipeline.lib.core.models import Entity, EntityNames

_TOKEN = re.compile(r"[\w][\w'’.\-/]*", re.UNICODE)
_LETTERS = re.compile(r"[^\W\d_]+", re.UNICODE)
_SEPARATORS = re.compile(r"[\s_\-]+")
MAX_NGRAM = 8
# Function words are never entities on their own, however some extractor spelled a node.
STOPWORDS = frozenset(
    "a an and are as at be by for from has have he her his how in is it its of on or she that the their them they "
    "this to was were what when where which who whom whose why will with".split()
)
# A word of English (Zipf scale: 2 is one per hundred million words; "balancer" 2.3, "config" 2.9, "alert" 4.3,
# "Kafka" 3.0, "etcd" 0) that the corpus writes in lower case most of the time is an ordinary word there, however
# capitalized the question writes it; a word the corpus never writes is ordinary when it is common English (3.5:
# about 3 per million words).
ENGLISH_WORD_ZIPF = 2.0
ORDINARY_WORD_ZIPF = 3.5
GENERIC_NAME_CONFIDENCE = 0.3
_EDGE_PUNCTUATION = " \t\n\"'`.,;:!?()[]{}<>*\u201c\u201d\u2018\u2019"


@dataclass(frozen=True)
class NameLink:
    """Question words that name entities."""

    phrase: str
    entity_ids: frozenset[str]
    start: int  # character offset in the question
    confidence: float


class CorpusCase:
    """How the corpus writes each word: the share of its occurrences that are lower-case tells an ordinary word
    ("job", "complete") from a name ("Kafka", "Paris"), whatever the question's capitalization."""

    def __init__(self, texts: Iterable[str]):
        self._lower: Counter[str] = Counter()
        self._total: Counter[str] = Counter()
        spellings: Counter[str] = Counter()
        for text in texts:
            spellings.update(_LETTERS.findall(text))  # counted in C; each distinct spelling folded once below
        for word, count in spellings.items():
            key = word.casefold()
            self._total[key] += count
            if word == key:
                self._lower[key] += count

    def lowercase_share(self, word: str) -> float | None:
        """Share of the word's occurrences written in lower case; None when the corpus never writes it."""
        key = word.casefold()
        total = self._total.get(key)
        return self._lower[key] / total if total else None


def is_generic_word(phrase: str, corpus: CorpusCase) -> bool:
    """A span made only of ordinary words ("config.", "Load Balancer", "AUTHENTICATION"): each an English word of a
    word's shape that the corpus mostly writes in lower case, or a common one it never writes. Edge punctuation and
    function words do not count; one word with a name's shape (digits, hyphens, CamelCase: "Kafka2", "payments-api")
    makes the span a name."""
    words = [word for word in phrase.strip(_EDGE_PUNCTUATION).split() if word.casefold() not in STOPWORDS]
    return bool(words) and all(_is_ordinary_word(word.strip(_EDGE_PUNCTUATION), corpus) for word in words)


def _is_ordinary_word(word: str, corpus: CorpusCase) -> bool:
    if not is_plain_word(word):
        return False
    frequency = zipf_frequency(word.casefold(), "en")
    share = corpus.lowercase_share(word)
    if share is None:
        return frequency >= ORDINARY_WORD_ZIPF
    return frequency >= ENGLISH_WORD_ZIPF and share >= 0.5


class NameIndex:
    def __init__(
        self, entities: Iterable[Entity | EntityNames], corpus: CorpusCase | None = None,
        head_words: Iterable[str] = (),
    ):
        """``head_words``: generic words that a name is often written with ("service" in "Checkout Service"): a
        question phrase names the entity of what is left without them too."""
        self._ids_by_name: dict[str, set[str]] = {}
        self._names_by_id: dict[str, set[str]] = {}  # the other way round, for `names`
        self._corpus = corpus or CorpusCase(())
        self._head_words = frozenset(normalize_name(word) for word in head_words)
        for entity in entities:
            # An entity's canonical name is its name's key, as a rule: normalize_name gives a key back unchanged,
            # so its variants are the name's and are not worked out twice (a third of building this index).
            name_key = normalize_name(entity.name)
            keys = {name_key, *(normalize_name(n) for n in (entity.canonical, *entity.aliases) if n != name_key)}
            for each in keys:
                # "Ledger Service" is also written "ledger-service" or "LedgerService" (split by normalize_name).
                for key in key_variants(each):
                    if key not in STOPWORDS and not key.isdigit():
                        self._ids_by_name.setdefault(key, set()).add(entity.entity_id)
                        self._names_by_id.setdefault(entity.entity_id, set()).add(key)

    def __len__(self) -> int:
        return len(self._ids_by_name)

    @property
    def ids_by_name(self) -> Mapping[str, set[str]]:
        """Name key → the entities it names (read-only)."""
        return self._ids_by_name

    def ids(self, name: str) -> set[str]:
        """The entities named ``name`` (as spelled in any of its variants)."""
        return set(self._ids_by_name.get(normalize_name(name), ()))

    def _without_head_words(self, key: str) -> set[str]:
        """The entities named by a key once generic head words at its edges are dropped ("checkout service" →
        "checkout")."""
        stripped = without_edge_words(key, self._head_words)
        return self._ids_by_name.get(stripped, set()) if stripped and stripped != key else set()

    def names(self, entity_ids: Iterable[str]) -> dict[str, set[str]]:
        """Name key → the given entities it names (what a document title must match to be about one of them)."""
        named: dict[str, set[str]] = {}
        for entity_id in set(entity_ids):
            for key in self._names_by_id.get(entity_id, ()):
                named.setdefault(key, set()).add(entity_id)
        return named

    def link(self, text: str) -> list[NameLink]:
        """The question's phrases that name entities, in question order. Longer matches win over the n-grams inside
        them; each link's confidence is 1, or ``GENERIC_NAME_CONFIDENCE`` for an ordinary word."""
        tokens = list(_TOKEN.finditer(text))
        links: list[NameLink] = []
        covered: set[int] = set()
        for size in range(min(MAX_NGRAM, len(tokens)), 0, -1):
            for start in range(0, len(tokens) - size + 1):
                span = set(range(start, start + size))
                if span & covered:
                    continue
                phrase = text[tokens[start].start() : tokens[start + size - 1].end()]
                key = normalize_name(phrase)
                # "Ledger Writer" also names "ledgerwriter": names are written joined as often as spaced.
                joined = _SEPARATORS.sub("", key)
                ids = self._ids_by_name.get(key, set()) | self._without_head_words(key)
                if joined != key and " " in key:
                    ids = ids | self._ids_by_name.get(joined, set())
                if ids:
                    covered |= span
                    confidence = GENERIC_NAME_CONFIDENCE if is_generic_word(phrase, self._corpus) else 1.0
                    links.append(NameLink(phrase, frozenset(ids), tokens[start].start(), confidence))
        return sorted(links, key=lambda link: link.start)
