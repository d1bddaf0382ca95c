"""Question → entity linking by exact n-gram match against every entity name and alias.

Cheap (a dictionary probe per n-gram) and precise; the embedding match over the entities collection complements it
for paraphrases.
"""

from __future__ import annotations

import re
from typing import Iterable

from graphrag_pipeline.lib.ids import normalize_name
from graphrag_pipeline.lib.models import Entity

_TOKEN = re.compile(r"[\w][\w'’.\-/]*", re.UNICODE)
MAX_NGRAM = 8
# Function words are never entities on their own, however some extractor spelled a node.
STOPWORDS = frozenset(
    "a an and are as at be by for from has have he her his how in is it its of on or she that the their them they "
    "this to was were what when where which who whom whose why will with".split()
)


class NameIndex:
    def __init__(self, entities: Iterable[Entity]):
        self._ids_by_name: dict[str, set[str]] = {}
        for entity in entities:
            for name in (entity.name, entity.canonical, *entity.aliases):
                key = normalize_name(name)
                if key and key not in STOPWORDS and not key.isdigit():
                    self._ids_by_name.setdefault(key, set()).add(entity.entity_id)

    def __len__(self) -> int:
        return len(self._ids_by_name)

    def link(self, text: str) -> dict[str, str]:
        """Entity id → the question's words that named it. Longer matches win over the n-grams inside them."""
        tokens = [m.group(0) for m in _TOKEN.finditer(text)]
        linked: dict[str, str] = {}
        covered: set[int] = set()
        for size in range(min(MAX_NGRAM, len(tokens)), 0, -1):
            for start in range(0, len(tokens) - size + 1):
                span = set(range(start, start + size))
                if span & covered:
                    continue
                phrase = " ".join(tokens[start : start + size])
                ids = self._ids_by_name.get(normalize_name(phrase))
                if ids:
                    covered |= span
                    for eid in ids:
                        linked.setdefault(eid, phrase)
        return linked
