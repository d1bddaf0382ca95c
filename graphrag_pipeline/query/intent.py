"""Which relationships a question asks for, in which direction, from which of its entities.

Decided only by the ontology: each relationship type's ``query_phrases`` (regular expressions with ``{x}`` where
the question names the entity it is about) and the ontology's ``query_references`` ("it", "this service") by which a
question points back at an entity it named. The engine holds no English of its own.

A phrase counts only in the question's own asking clauses: its sentences that end with a question mark, or, when it
has none (an instruction), its first clause. Text a question quotes ("An alert is firing: <the alert's
description>") may use the same words ("... calls vault") without asking for anything.

A reference points back at the most confident entity the question named that has relationships of the asked type:
that the question asks for such relationships of it is what makes an ordinary word ("cart", "Currency") a name.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from graphrag_pipeline.lib.core.config import QUERY_SUBJECT, Ontology
from graphrag_pipeline.lib.stores.protocols import AskedRelationships
from graphrag_pipeline.query.linking import NameLink

Direction = Literal["outgoing", "incoming"]
# A question entity must be linked at least this confidently to be the subject a reference ("it") points back to,
# unless it has relationships of the asked type.
SUBJECT_MIN_CONFIDENCE = 0.5
# Punctuation ends a sentence or clause only before a space or the end ("payments-api.v2?" is one word).
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+")
_CLAUSE_END = re.compile(r"[.!?:;](?=\s|$)")
HasRelationships = Callable[[frozenset[str], str], bool]  # (entity ids, relationship type) -> any such edge?


def asking_clauses(text: str) -> list[str]:
    """The parts of a question that ask: its sentences ending in "?", else its first clause."""
    asked = [sentence for sentence in _SENTENCE_BREAK.split(text.strip()) if sentence.endswith("?")]
    return asked or [_CLAUSE_END.split(text, 1)[0]]


@dataclass(frozen=True)
class RelationIntent:
    """Follow ``relationship_type`` edges in ``direction`` from ``subjects`` (entity ids)."""

    relationship_type: str
    direction: Direction
    subjects: frozenset[str]
    phrase: str  # the question's words that asked for it
    # Its subject is a chain reference ("them"): follow it from what the intent before it reached, when one did
    # (``subjects`` is the question's entity a plain reference would mean, for when none did).
    chained: bool = False


class IntentReader:
    """The ontology's query phrases, compiled once."""

    def __init__(self, ontology: Ontology):
        self._phrases: list[tuple[str, Direction, str]] = [
            (spec.name, direction, phrase)
            for spec in ontology.relationship_types
            for direction in ("outgoing", "incoming")
            for phrase in getattr(spec.query_phrases, direction)
        ]
        self._keys = [(relationship_type, direction) for relationship_type, direction, _ in self._phrases]
        self._chain_references = frozenset(ontology.query_chain_references)
        self._references = sorted({*ontology.query_references, *ontology.query_chain_references}, key=len,
                                  reverse=True)
        determiners = _alternation(sorted(ontology.query_determiners, key=len, reverse=True))
        self._determiner = f"(?:(?:{determiners}) )?" if determiners else ""
        # Each phrase with any words where the subject goes, compiled once: a question it does not match cannot match
        # the phrase with the question's own subjects, so only the few phrases it does match are compiled per
        # question (compiling all of them for every question cost more than the rest of reading its intents).
        self._outlines = [
            re.compile(r"\b" + phrase.replace(QUERY_SUBJECT, "(?:.+?)") + r"\b") for _, _, phrase in self._phrases
        ]

    def read(
        self, question: str, links: Sequence[NameLink], has_relationships: HasRelationships | None = None,
    ) -> list[RelationIntent]:
        """Every relationship the question's asking clauses ask for, in the order the question asks them. ``{x}``
        matches the words of a link (that link's entities are the subjects) or a reference: the most confident link
        (earliest of equals) that is confident enough or, given ``has_relationships``, that has relationships of
        the asked type. A chain reference ("who owns them") marks the intent ``chained``."""
        if not self._phrases or not links:
            return []
        by_phrase = {" ".join(link.phrase.casefold().split()): link for link in links}
        referents = sorted(links, key=lambda link: (-link.confidence, link.start))
        intents: dict[tuple[str, Direction], tuple[tuple[int, int], RelationIntent]] = {}
        for (relationship_type, direction), clause_number, match in self._matches(question, tuple(by_phrase)):
            if (relationship_type, direction) in intents:
                continue
            named = by_phrase.get(match["x"]) or self._referent(referents, relationship_type, has_relationships)
            chained = match["x"] in self._chain_references
            if named is not None or chained:
                subjects = named.entity_ids if named is not None else frozenset()
                intents[(relationship_type, direction)] = ((clause_number, match.start("x")), RelationIntent(
                    relationship_type, direction, subjects, match.group(0), chained))
        return [intent for _, intent in sorted(intents.values(), key=lambda item: item[0])]

    def asked(self, question: str, links: Sequence[NameLink]) -> AskedRelationships | None:
        """What ``read`` may follow for these links, whatever relationships the graph holds, so a store can read it
        before ``read`` runs: every (type, direction) a phrase of the asking clauses matches, from every link's
        entities, as many steps on as there are such pairs whose phrases match a chain reference (each chained
        intent follows what the one before it reached). ``None``: the question asks for none."""
        if not self._phrases or not links:
            return None
        by_phrase = {" ".join(link.phrase.casefold().split()): link for link in links}
        steps: set[tuple[str, Direction]] = set()
        chained: set[tuple[str, Direction]] = set()
        for key, _, match in self._matches(question, tuple(by_phrase)):
            steps.add(key)
            if match["x"] in self._chain_references:
                chained.add(key)
        if not steps:
            return None
        entity_ids = sorted({entity_id for link in links for entity_id in link.entity_ids})
        return AskedRelationships(tuple(entity_ids), tuple(sorted(steps)), 1 + len(chained))

    @functools.lru_cache(maxsize=16)  # noqa: B019 (one reader per open index: ``asked``, then ``read``, per question)
    def _matches(
        self, question: str, names: tuple[str, ...],
    ) -> tuple[tuple[tuple[str, Direction], int, re.Match[str]], ...]:
        """Each phrase's matches in the question's asking clauses, clause by clause, as ((type, direction), clause
        number, match), where ``{x}`` matched one of ``names`` (casefolded) or a reference."""
        clauses = asking_clauses(" ".join(question.casefold().split()))
        subject = _alternation([*sorted(names, key=len, reverse=True), *self._references])
        found = []
        for key, outline, (_, _, phrase) in zip(self._keys, self._outlines, self._phrases):
            for clause_number, clause in enumerate(clauses):
                if outline.search(clause) is None:
                    continue
                match = re.search(
                    r"\b" + phrase.replace(QUERY_SUBJECT, f"{self._determiner}(?P<x>{subject})") + r"\b", clause)
                if match is not None:
                    found.append((key, clause_number, match))
        return tuple(found)

    @staticmethod
    def _referent(
        referents: Sequence[NameLink], relationship_type: str, has_relationships: HasRelationships | None,
    ) -> NameLink | None:
        for link in referents:
            if has_relationships is None:
                return link if link.confidence >= SUBJECT_MIN_CONFIDENCE else None
            if has_relationships(link.entity_ids, relationship_type):
                return link
        return None


def _alternation(words: Sequence[str]) -> str:
    return "|".join(re.escape(word) for word in words if word)

