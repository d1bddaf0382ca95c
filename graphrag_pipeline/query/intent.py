"""Which relationships a question asks for, in which direction, from which of its entities.

Decided only by the ontology: each relationship type's ``query_phrases`` (regular expressions with ``{x}`` where
the question names the entity it is about) and the ontology's ``query_references`` ("it", "this service") by which a
question points back at an entity it named. The engine holds no English of its own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from graphrag_pipeline.lib.config import QUERY_SUBJECT, Ontology
from graphrag_pipeline.query.linking import NameLink

Direction = Literal["outgoing", "incoming"]
# A question entity must be linked at least this confidently to be the subject a reference ("it") points back to.
SUBJECT_MIN_CONFIDENCE = 0.5


@dataclass(frozen=True)
class RelationIntent:
    """Follow ``relationship_type`` edges in ``direction`` from ``subjects`` (entity ids)."""

    relationship_type: str
    direction: Direction
    subjects: frozenset[str]
    phrase: str  # the question's words that asked for it


class IntentReader:
    """The ontology's query phrases, compiled once."""

    def __init__(self, ontology: Ontology):
        self._phrases: list[tuple[str, Direction, str]] = [
            (spec.name, direction, phrase)
            for spec in ontology.relationship_types
            for direction in ("outgoing", "incoming")
            for phrase in getattr(spec.query_phrases, direction)
        ]
        self._references = sorted(ontology.query_references, key=len, reverse=True)
        # Each phrase with any words where the subject goes, compiled once: a question it does not match cannot match
        # the phrase with the question's own subjects, so only the few phrases it does match are compiled per
        # question (compiling all of them for every question cost more than the rest of reading its intents).
        self._outlines = [
            re.compile(r"\b" + phrase.replace(QUERY_SUBJECT, "(?:.+?)") + r"\b") for _, _, phrase in self._phrases
        ]

    def read(self, question: str, links: Sequence[NameLink]) -> list[RelationIntent]:
        """Every relationship the question asks for. ``{x}`` matches the words of a link (that link's entities are
        the subjects) or a reference (the earliest of the most confident links', if any is confident enough)."""
        if not self._phrases or not links:
            return []
        text = " ".join(question.casefold().split())
        by_phrase = {" ".join(link.phrase.casefold().split()): link for link in links}
        names = sorted(by_phrase, key=len, reverse=True)
        subject = _alternation([*names, *self._references])
        referent = max(links, key=lambda link: (link.confidence, -link.start))
        intents: dict[tuple[str, Direction], RelationIntent] = {}
        for (relationship_type, direction, phrase), outline in zip(self._phrases, self._outlines):
            if outline.search(text) is None:
                continue
            match = re.search(r"\b" + phrase.replace(QUERY_SUBJECT, f"(?P<x>{subject})") + r"\b", text)
            if match is None:
                continue
            named = by_phrase.get(match["x"])
            if named is None and referent.confidence < SUBJECT_MIN_CONFIDENCE:
                continue
            key = (relationship_type, direction)
            if key not in intents:
                intents[key] = RelationIntent(relationship_type, direction, (named or referent).entity_ids,
                                              match.group(0))
        return list(intents.values())


def _alternation(words: Sequence[str]) -> str:
    return "|".join(re.escape(word) for word in words if word)

