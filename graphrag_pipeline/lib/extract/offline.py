"""Entity and relationship extraction without a language model.

Four spotters find entity spans in a chunk: a dictionary of known names (configured ones and the caller's
``known_names``, such as a catalog's), configured regular expressions, spaCy NER and the document's title. Overlapping
spans are resolved (dictionary > pattern > title > NER, then longer spans) and names are canonicalized through the
configured aliases. NER's person, organization and place labels on technical-looking names (acronyms, CamelCase,
kebab-case, snake_case, lower-case or digit-bearing words) are replaced by a shape rule: see ``_ner_type``.

Relations: a configured relation pattern found in a sentence is a verb phrase. Its subject is the nearest entity
before it (or the document's title entity when the clause starts with a reference to it, "It uses …"), its objects
the list of entities right after it, so "A depends on B and C" and "B, which is used by A" are typed edges. Every
other pair of entities in a sentence co-occurs (the fallback type). Markdown link targets, URLs and HTML tags are
blanked out first, so raw markdown sources do not produce names like "Docs](https://…".

Everything is deterministic and extractive: descriptions are the sentences the entities and relations were seen in.

``precomputed_extractions`` adapts the ``extraction.jsonl`` files some evaluation sets ship (entities and triples
per document) to the same ``ChunkExtraction`` records.
"""

from __future__ import annotations

import bisect
import functools
import json
import math
import multiprocessing
import os
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphrag_pipeline.lib.core.config import ExtractionConfig, Ontology
from graphrag_pipeline.lib.core.ids import normalize_name
from graphrag_pipeline.lib.core.models import Chunk, ChunkExtraction, EntityMention, Quarantined, RelationMention

if TYPE_CHECKING:
    from spacy.language import Language

DESCRIPTION_CHARS = 300
TITLE_PREDICATE = "mentions"
TITLE_WEIGHT = 0.5
COOCCURRENCE_PREDICATE = "co-occurs"
# spaCy's NER needs about 1 GB of scratch memory per 100k characters; longer texts are fed to it in pieces.
SEGMENT_CHARS = 20_000
# NER helper processes start once an extractor has annotated this much text itself (about 4 s on one core here):
# starting them costs about 2 s of the helpers' time, which a small build would not win back.
PARALLEL_NER_AFTER_CHARS = 250_000
# Unless configured, at most this many NER processes: each helper holds its own interpreter and model (a few hundred
# MB), which a many-core host would otherwise multiply by its cores.
DEFAULT_MAX_NER_PROCESSES = 4

# Curated names beat regexes, regexes beat the document title, the title beats the statistical model.
_PRIORITY = {"dictionary": 0, "pattern": 1, "title": 2, "ner": 3}

_NLP_CACHE: dict[str, Language] = {}
_NLP_LOCK = threading.Lock()

# Hyphens count as word characters at name boundaries: "redis" inside "redis-service" is part of a service name.
_BOUNDARY_BEFORE = r"(?<![\w-])"
_BOUNDARY_AFTER = r"(?![\w-])"
_LEADING_DETERMINER = re.compile(r"(?:the|a|an|this|that|these|those)\s+", re.IGNORECASE)
_EDGE_CHARS = frozenset(" \t\r\n\"'`.,;:!?()[]{}<>*\u201c\u201d\u2018\u2019")
_POSSESSIVES = ("'s", "\u2019s")
_EDGE_TEXT = "".join(_EDGE_CHARS)
_HAS_LETTER = re.compile(r"[^\W\d_]")
_WORD = re.compile(r"[^\W\d_]+")
# Hard-wrapped prose keeps its single newlines; blank lines and markdown blocks (headings, list items, tables, code
# fences) end a "sentence", otherwise a bullet list would read as one sentence relating every item to every other.
_BLOCK_BREAK = re.compile(r"\n\s*\n|\n(?=[ \t]*(?:#|>|\||```|[-*+][ \t]|\d+[.)][ \t]))")
_PLAIN_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
# Markdown sources arrive raw: link targets, bare URLs and inline HTML tags are blanked out (same length, so offsets
# still point into the chunk) before spotting, or NER reads "Memorystore](https://cloud.google.com" as a name.
_MARKUP = re.compile(
    r"!?\[(?=[^\[\]\n]{0,300}\]\()"  # the opening bracket of a link or image whose text is kept
    r"|\]\([^)\s]*(?:\s+\"[^\"\n]*\")?\)"  # the link target
    r"|<[^<>\n]{1,500}>"  # an HTML tag
    r"|\b(?:https?|ftp)://[^\s<>\"]*[^\s<>\".,;:!?)\]]"  # a bare URL, without the punctuation that follows it
)
_MARKUP_IN_NAME = re.compile(r"[\[\]{}<>|=\\]|://")

# spaCy's labels for people, organizations, places and nationalities: proper nouns of prose. A technical-looking name
# under one of them is an NER mistake; code-like names are relabelled as spaCy's software label, acronyms (whose
# kind the shape does not tell: CPU, API, HPA, TLS) get the ontology's default type.
_PROPER_NOUN_LABELS = frozenset({"PERSON", "ORG", "GPE", "LOC", "FAC", "NORP"})
_SOFTWARE_LABEL = "PRODUCT"
_ACRONYM = re.compile(r"[A-Z][A-Z0-9]*[A-Z][A-Z0-9]*s?")
# CamelCase (a capital after two lower-case letters: "McLean" is a surname), lower-case kebab-case, an inner _ or /, a
# lower-case dotted part, letters mixed with digits: identifiers, file names and versions, not words of prose
# ("Hewlett-Packard" is prose).
_CODE_LIKE = re.compile(r"[a-z]{2}[A-Z]|[a-z0-9]-[a-z0-9]|\w[_/]\w|[a-z0-9]\.[a-z]|[^\W\d_]\d|\d[^\W\d_]")

# Relation statements. These are words of grammar, not of relations (the relation words are the configured
# patterns): which words continue a list of objects, which introduce a relative clause about the entity before
# them, and which negate the statement.
# Code quotes and emphasis around a name are markup, not words between it and a verb phrase.
_QUOTING = re.compile(r"[`*\"\u201c\u201d]")
# A verb phrase's subject is looked for only after the last of these before it ("X fails; it uses Y": "it").
_CLAUSE_BREAK = re.compile(r"[;:()\[\]{}!?|\u2013\u2014]|\s-\s|\.\s")
# "A uses B, C and D": what may stand between two objects of one verb phrase.
_LIST_SEPARATOR = re.compile(r"\s*(?:[,/&]\s*)?(?:(?:and|or)\s+)?(?:(?:the|a|an)\s+)?", re.IGNORECASE)
_RELATIVE_CLAUSE = re.compile(r"\s*,\s*(?:which|that|who)\s+", re.IGNORECASE)
_NOT_IN_A_GAP = frozenset({"and", "or", "but", "not", "no", "never", "nor", "if", "when", "whether", "because"})
# At most this many words ("also", "at least", "the official") between a verb phrase and its subject or first object.
MAX_GAP_WORDS = 2
# How a sentence refers to the entity its document is about: "It uses …", "The service calls …" (for a document
# titled "… Service"), "This service depends on …".
_PRONOUN_REFERENCE = frozenset({"it"})
_DETERMINER_REFERENCE = frozenset({"the", "this"})


def _lowercase_words(text: str) -> frozenset[str]:
    return frozenset(word for word in _WORD.findall(text) if word.islower())


def _written_as_common_noun(surface: str, lowercase_words: frozenset[str]) -> bool:
    """Whether an NER span is one word, or words in capitals, that its own chunk also writes in lower case: "Alert",
    "Cluster" or "NAMESPACE" beside "alert", "cluster" and "namespace" are the text's common nouns capitalized by a
    heading or a template, not a person's or a place's name. A name of prose is never written "paris"; one of
    several title-cased words ("Journal of Mathematical Physics") is a name whatever its words are elsewhere."""
    words = _WORD.findall(surface)
    if not words or (len(words) > 1 and not surface.isupper()):
        return False
    return all(word.casefold() in lowercase_words for word in words)


def load_spacy(model_name: str) -> Language:
    """The spaCy pipeline for NER and sentence boundaries, loaded once per process and model name."""
    with _NLP_LOCK:
        nlp = _NLP_CACHE.get(model_name)
        if nlp is None:
            import spacy  # deferred: importing spaCy costs about a second that the precomputed path never needs

            nlp = spacy.load(model_name)
            if "ner" not in nlp.pipe_names:
                raise ValueError(f"spaCy model {model_name!r} has no 'ner' component")
            # Keep NER and whatever shared embedding layer it listens to; the tagger and parser cost most of the time.
            keep = {"ner"} | {
                name for name, pipe in nlp.pipeline if "ner" in getattr(pipe, "listening_components", ())
            }
            nlp.select_pipes(enable=[name for name in nlp.pipe_names if name in keep])
            nlp.add_pipe("sentencizer")
            _NLP_CACHE[model_name] = nlp
        return nlp


# (sentence spans, (start, end, label) entity spans) of one text, in its character offsets.
_Annotation = tuple[list[tuple[int, int]], list[tuple[int, int, str]]]


def _annotations(nlp: Language, texts: Sequence[str], batch_size: int) -> list[_Annotation]:
    return [
        ([(sent.start_char, sent.end_char) for sent in doc.sents],
         [(ent.start_char, ent.end_char, ent.label_) for ent in doc.ents])
        for doc in nlp.pipe(texts, batch_size=batch_size)
    ]


def available_cores(cgroup_root: Path = Path("/sys/fs/cgroup")) -> int:
    """The cores this process may use: its CPU affinity (a container's cpuset), and no more than a CPU quota of its
    cgroup allows (a Kubernetes or Docker CPU limit leaves the affinity at every core of the node)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = _cgroup_cpu_quota(cgroup_root)
    return max(1, min(cores, math.ceil(quota))) if quota else cores


def _cgroup_cpu_quota(root: Path) -> float | None:
    """CPUs' worth of time per period the cgroup may use (cgroup v2 cpu.max, else v1's cfs quota); None when it is
    unlimited ("max", -1) or unreadable."""
    readings = (
        lambda: (root / "cpu.max").read_text().split()[:2],
        lambda: [(root / "cpu" / name).read_text() for name in ("cpu.cfs_quota_us", "cpu.cfs_period_us")],
    )
    for read in readings:
        try:
            quota, period = (int(value) for value in read())
        except (OSError, ValueError):  # missing, "max", or not two numbers
            continue
        return quota / period if quota > 0 and period > 0 else None
    return None


class _NerWorkers:
    """spaCy NER shared between the calling process and helper processes: spaCy runs on one core, so on a machine
    with more, extraction was the build's slowest stage after embedding. Each call's texts are split into contiguous
    parts of about equal length; the caller annotates the first itself while the helpers annotate the rest. spaCy's
    annotation of a text does not depend on the texts batched with it, so the result equals the one-process one.
    Helpers are spawned, not forked: the calling process may be running torch's threads, which a fork can leave
    deadlocked in the child. A spawned helper imports the caller's main module and loads the model (seconds); the
    caller annotates everything itself until every helper has answered once."""

    def __init__(self, model_name: str, helpers: int, batch_size: int):
        self._batch_size = batch_size
        self._parts = helpers + 1
        self._executor = ProcessPoolExecutor(helpers, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_load_helper_model, initargs=(model_name, batch_size))
        self._started = [self._executor.submit(_annotate_in_helper, []) for _ in range(helpers)]
        self.shared_calls = 0

    def ready(self) -> bool:
        """Whether the helpers have started; one that failed to start raises its error here."""
        if not all(started.done() for started in self._started):
            return False
        for started in self._started:
            started.result()
        return True

    def annotate(self, nlp: Language, texts: list[str]) -> list[_Annotation]:
        self.shared_calls += 1
        bounds = _equal_parts([len(text) for text in texts], self._parts)
        futures = [self._executor.submit(_annotate_in_helper, texts[start:end]) for start, end in bounds[1:]]
        try:
            first = _annotations(nlp, texts[bounds[0][0] : bounds[0][1]], self._batch_size)
            return first + [annotation for future in futures for annotation in future.result()]
        finally:
            for future in futures:
                future.cancel()

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)


def _equal_parts(lengths: Sequence[int], parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous (start, end) index ranges of about equal total length (some empty when there are few)."""
    total = sum(lengths)
    bounds, start, running = [], 0, 0
    for part in range(1, parts):
        end = start
        while end < len(lengths) and running + lengths[end] <= total * part / parts:
            running += lengths[end]
            end += 1
        bounds.append((start, end))
        start = end
    bounds.append((start, len(lengths)))
    return bounds


_HELPER_MODEL: tuple[Language, int] | None = None


def _load_helper_model(model_name: str, batch_size: int) -> None:
    global _HELPER_MODEL
    _HELPER_MODEL = (load_spacy(model_name), batch_size)


def _annotate_in_helper(texts: list[str]) -> list[_Annotation]:
    assert _HELPER_MODEL is not None, "the helper's initializer loads the model"
    return _annotations(_HELPER_MODEL[0], texts, _HELPER_MODEL[1])


@dataclass(frozen=True, slots=True)
class _Span:
    start: int
    end: int
    name: str  # display form, aliases already applied
    key: str  # normalize_name of the display form: identity within a chunk
    type: str
    spotter: str


@dataclass(frozen=True, slots=True)
class _Phrase:
    """A match of a relation pattern in a sentence: the verb phrase of a stated relation."""

    start: int
    end: int
    type: str
    predicate: str
    reverse: bool  # the phrase's subject is the relation's target ("B is used by A")


@dataclass(frozen=True, slots=True)
class _Statement:
    source: _Span
    target: _Span
    type: str
    predicate: str


@dataclass(frozen=True, slots=True)
class _NlpResult:
    sentences: tuple[tuple[int, int], ...]
    entities: tuple[tuple[int, int, str], ...]  # start, end, spaCy label


class _DictionarySpotter:
    """Case-insensitive whole-word matching of thousands of names with one regex compiled from a character trie,
    so matching costs one pass over the text however many names there are; the longest name wins."""

    def __init__(self, names: Mapping[str, str]):  # name -> entity type
        self._lookup: dict[str, tuple[str, str]] = {}
        trie: dict[str, Any] = {}
        for name, entity_type in names.items():
            surface = " ".join(name.split())
            key = surface.lower()
            if not key or key in self._lookup:
                continue
            self._lookup[key] = (surface, entity_type)
            node = trie
            for char in key:
                node = node.setdefault(char, {})
            node[""] = {}
        self._regex = (
            re.compile(_BOUNDARY_BEFORE + _trie_pattern(trie) + _BOUNDARY_AFTER, re.IGNORECASE) if trie else None
        )

    def find(self, text: str) -> Iterator[tuple[int, int, str, str]]:
        if self._regex is None:
            return
        for match in self._regex.finditer(text):
            # Regex case-insensitivity also folds a few exotic characters (the Kelvin sign) that lower() keeps.
            found = self._lookup.get(" ".join(match.group(0).split()).lower())
            if found is not None:
                yield match.start(), match.end(), *found


class _Sentences:
    """Sentence bounds of one chunk: which sentence a span is in, and its trimmed text."""

    def __init__(self, text: str, bounds: Sequence[tuple[int, int]]):
        self._text = text
        self._bounds = tuple(bounds) or ((0, len(text)),)
        self._starts = [start for start, _ in self._bounds]

    def index_of(self, span: _Span) -> int:
        return max(bisect.bisect_right(self._starts, span.start) - 1, 0)

    def bounds(self, index: int) -> tuple[int, int]:
        return self._bounds[index]

    def text(self, index: int) -> str:
        start, end = self._bounds[index]
        return _trim(self._text[start:end])


def _trie_pattern(node: Mapping[str, Any]) -> str:
    branches = [
        (r"\s+" if char == " " else re.escape(char)) + _trie_pattern(child)
        for char, child in sorted(node.items())
        if char
    ]
    if not branches:
        return ""
    alternation = "(?:" + "|".join(branches) + ")"
    # Children come before the end of a name and '?' is greedy: the longest configured name is tried first.
    return alternation + "?" if "" in node else alternation


class OfflineExtractor:
    """Dictionary, pattern, NER and title spotters plus stated and co-occurrence relations; see the module docstring."""

    def __init__(
        self,
        extraction: ExtractionConfig,
        ontology: Ontology,
        batch_size: int = 64,
        known_names: Mapping[str, str] | None = None,
    ):
        """``known_names`` (name -> entity type, e.g. a service catalog's) are spotted like the configured dictionary,
        whose type wins when both name the same thing."""
        self._config = extraction
        self._ontology = ontology
        self._batch_size = batch_size
        self._aliases = {normalize_name(surface): canonical for surface, canonical in extraction.aliases.items()}
        names: dict[str, str] = {}
        for entity_type, type_names in extraction.dictionary.items():
            for name in type_names:
                names.setdefault(name, ontology.entity_type(entity_type))
        for name, entity_type in (known_names or {}).items():
            names.setdefault(name, ontology.entity_type(entity_type))
        dictionary_types = {normalize_name(name): entity_type for name, entity_type in names.items()}
        # Alias surface forms are names the user told us about: spot them too, typed like their canonical name.
        for surface, canonical in extraction.aliases.items():
            names.setdefault(
                surface, dictionary_types.get(normalize_name(canonical), ontology.default_entity_type)
            )
        self._dictionary = _DictionarySpotter(names)
        self._patterns = [(re.compile(p.regex), ontology.entity_type(p.type)) for p in extraction.patterns]
        self._relation_patterns = [
            (re.compile(p.regex), ontology.relationship_type(p.type), p.reverse) for p in extraction.relation_patterns
        ]
        self._ner_labels = {
            label: (ontology.entity_type(mapped) if mapped else None) for label, mapped in extraction.ner_labels.items()
        }
        self._title_type = ontology.entity_type(extraction.title_entity_type) if extraction.title_entity_type else None
        self._ner_processes = extraction.ner_processes or min(available_cores(), DEFAULT_MAX_NER_PROCESSES)
        self._ner_chars_in_process = 0
        self._ner_workers: _NerWorkers | None = None

    def close(self) -> None:
        """Stops the NER helper processes, if any were started."""
        if self._ner_workers is not None:
            self._ner_workers.close()
            self._ner_workers = None

    def extract(self, chunks: Sequence[Chunk], titles: Mapping[str, str] | None = None) -> list[ChunkExtraction]:
        """One extraction per chunk, in order. ``titles`` maps doc_id to the document title."""
        texts = [_MARKUP.sub(lambda match: " " * len(match.group(0)), chunk.text) for chunk in chunks]
        nlp_results = self._run_nlp(texts)
        titles = titles or {}
        return [
            self._extract_chunk(chunk.chunk_id, text, titles.get(chunk.doc_id, ""), nlp_result)
            if nlp_result is not None
            else ChunkExtraction(chunk_id=chunk.chunk_id, entities=(), relations=())
            for chunk, text, nlp_result in zip(chunks, texts, nlp_results)
        ]

    def _run_nlp(self, texts: Sequence[str]) -> list[_NlpResult | None]:
        """Sentences and NER spans per text (None for blank texts), in the text's own character offsets."""
        segments = [
            (index, offset, piece)
            for index, text in enumerate(texts)
            if text.strip()
            for offset, piece in _segments(text, SEGMENT_CHARS)
        ]
        sentences: dict[int, list[tuple[int, int]]] = {}
        entities: dict[int, list[tuple[int, int, str]]] = {}
        if segments:
            pieces = [piece for _, _, piece in segments]
            for (index, offset, piece), (piece_sentences, piece_entities) in zip(segments, self._annotate(pieces)):
                sentences.setdefault(index, []).extend(
                    (offset + start, offset + end)
                    for sent_start, sent_end in piece_sentences
                    for start, end in _split_blocks(piece, sent_start, sent_end)
                )
                entities.setdefault(index, []).extend(
                    (offset + start, offset + end, label) for start, end, label in piece_entities
                )
        return [
            _NlpResult(tuple(sentences[index]), tuple(entities[index])) if index in sentences else None
            for index in range(len(texts))
        ]

    def _annotate(self, pieces: list[str]) -> list[_Annotation]:
        """spaCy's sentences and entities of each piece: in this process, or shared with helper processes once this
        extractor has read enough text that starting them pays (a small build never starts any)."""
        if self._ner_workers is None and self._ner_processes > 1 and self._ner_chars_in_process >= PARALLEL_NER_AFTER_CHARS:
            self._ner_workers = _NerWorkers(self._config.spacy_model, self._ner_processes - 1, self._batch_size)
        if self._ner_workers is not None and self._ner_workers.ready():
            return self._ner_workers.annotate(load_spacy(self._config.spacy_model), pieces)
        self._ner_chars_in_process += sum(map(len, pieces))
        return _annotations(load_spacy(self._config.spacy_model), pieces, self._batch_size)

    def _extract_chunk(self, chunk_id: str, text: str, title: str, nlp_result: _NlpResult) -> ChunkExtraction:
        candidates = self._candidate_spans(text, nlp_result.entities)
        title_span = self._title_span(title)
        if title_span is not None:
            candidates.extend(self._title_occurrences(text, title_span))
        spans = _resolve_overlaps(candidates)
        sentences = _Sentences(text, nlp_result.sentences)

        # One mention per entity: the highest-priority spotter decides name and type, the first occurrence the text.
        best: dict[str, _Span] = {}
        first_sentence: dict[str, int] = {}
        for span in spans:
            first_sentence.setdefault(span.key, sentences.index_of(span))
            if span.key not in best or _PRIORITY[span.spotter] < _PRIORITY[best[span.key].spotter]:
                best[span.key] = span
        if title_span is not None:
            # The chunk is about its title: listed first, described by the first sentence unless it occurs later.
            others = {key: span for key, span in best.items() if key != title_span.key}
            best = {title_span.key: self._title_mention(title_span, candidates), **others}
            first_sentence.setdefault(title_span.key, 0)
        entities = tuple(
            EntityMention(
                name=span.name,
                type=span.type,
                description=sentences.text(first_sentence[key]),
                chunk_id=chunk_id,
                spotter=span.spotter,
            )
            for key, span in best.items()
        )
        relations = self._relations(chunk_id, text, spans, sentences, title_span)
        if title_span is not None:
            relations += self._title_relations(chunk_id, title_span.key, best, relations, entities)
        return ChunkExtraction(chunk_id=chunk_id, entities=entities, relations=tuple(relations))

    def _candidate_spans(self, text: str, ner_entities: Sequence[tuple[int, int, str]]) -> list[_Span]:
        found: list[tuple[int, int, str | None, str, str]] = [
            (start, end, surface, entity_type, "dictionary")
            for start, end, surface, entity_type in self._dictionary.find(text)
        ]
        for regex, entity_type in self._patterns:
            found.extend((m.start(), m.end(), None, entity_type, "pattern") for m in regex.finditer(text))
        lowercase_words: frozenset[str] | None = None  # the chunk's words written in lower case, read once if needed
        for start, end, label in ner_entities:
            if label in _PROPER_NOUN_LABELS:
                lowercase_words = lowercase_words if lowercase_words is not None else _lowercase_words(text)
                if _written_as_common_noun(text[start:end], lowercase_words):
                    continue
            entity_type = self._ner_type(label, text[start:end])
            if entity_type is not None:
                found.append((start, end, None, entity_type, "ner"))
        spans = []
        for start, end, surface, entity_type, spotter in found:
            cleaned = _clean_bounds(text, start, end)
            if cleaned is None:
                continue
            start, end = cleaned
            span = self._make_span(start, end, surface or text[start:end], entity_type, spotter)
            if span is not None:
                spans.append(span)
        return spans

    def _ner_type(self, label: str, surface: str) -> str | None:
        """The ontology type for an NER span; None drops it. A person, organization or place label on a name with a
        technical word in it is replaced: code-like names take the software label's type, acronyms the default."""
        cleaned = _clean_bounds(surface, 0, len(surface))
        if label in _PROPER_NOUN_LABELS and cleaned is not None:
            name = surface[cleaned[0] : cleaned[1]]
            words = [word for word in (word.strip(_EDGE_TEXT) for word in name.split()) if word]
            # A name of prose starts with a capital ("University of Copenhagen"); "kubelet Service" is code-like.
            if any(_CODE_LIKE.search(word) for word in words) or (words and words[0][0].islower()):
                label = _SOFTWARE_LABEL
            elif any(_ACRONYM.fullmatch(word) for word in words):
                return self._ontology.default_entity_type
        return self._ner_labels.get(label, self._ontology.default_entity_type)

    def _make_span(self, start: int, end: int, surface: str, entity_type: str, spotter: str) -> _Span | None:
        name = " ".join(surface.split())
        if len(name) < self._config.min_name_length or not _HAS_LETTER.search(name) or _MARKUP_IN_NAME.search(name):
            return None
        # English names are capitalized; NER's all-lowercase hits in technical text are common nouns ("node", "pod").
        if spotter == "ner" and not any(char.isupper() for char in name):
            return None
        name = self._aliases.get(normalize_name(name), name)
        key = normalize_name(name)
        return _Span(start, end, name, key, entity_type, spotter) if key else None

    def _title_span(self, title: str) -> _Span | None:
        """The title as a position-less span, cleaned like any other name, without a trailing qualifier in
        parentheses ("Robert Young (musician)" names Robert Young, as the text does); None when titles are off or
        unusable."""
        if self._title_type is None or not title.strip():
            return None
        title = _TITLE_QUALIFIER.sub("", title) or title
        cleaned = _clean_bounds(title, 0, len(title))
        if cleaned is None:
            return None
        return self._make_span(0, 0, title[cleaned[0] : cleaned[1]], self._title_type, "title")

    @staticmethod
    def _title_occurrences(text: str, title_span: _Span) -> list[_Span]:
        regex = _flexible_name_regex(title_span.name)
        return [
            _Span(m.start(), m.end(), title_span.name, title_span.key, title_span.type, "title")
            for m in regex.finditer(text)
        ]

    def _title_mention(self, title_span: _Span, candidates: Sequence[_Span]) -> _Span:
        """The title entity, typed by any spotter that recognized the same name with something more specific."""
        specific = sorted(
            (span for span in candidates if span.key == title_span.key and span.spotter != "title"),
            key=lambda span: _PRIORITY[span.spotter],
        )
        for span in specific:
            if span.type != self._ontology.default_entity_type:
                return _Span(0, 0, title_span.name, title_span.key, span.type, "title")
        return title_span

    def _relations(
        self, chunk_id: str, text: str, spans: Sequence[_Span], sentences: _Sentences, title_span: _Span | None
    ) -> list[RelationMention]:
        fallback = self._ontology.fallback_relationship_type
        by_sentence: dict[int, list[_Span]] = {}
        for span in spans:
            by_sentence.setdefault(sentences.index_of(span), []).append(span)

        found: dict[tuple[str, ...], RelationMention] = {}
        typed_pairs: set[frozenset[str]] = set()
        for index, members in sorted(by_sentence.items()):
            description = sentences.text(index)
            start, end = sentences.bounds(index)
            for statement in self._statements(text, start, end, members, title_span):
                source, target = statement.source, statement.target
                typed_pairs.add(frozenset((source.key, target.key)))
                found.setdefault(
                    ("typed", source.key, statement.type, target.key),
                    RelationMention(
                        source=source.name,
                        target=target.name,
                        type=statement.type,
                        predicate=statement.predicate,
                        description=description,
                        weight=1.0,
                        chunk_id=chunk_id,
                    ),
                )
            if len(members) > self._config.max_entities_per_sentence:
                # A long enumeration is a list, not a web of relations: only neighbours are related.
                pairs = [(i, i + 1) for i in range(len(members) - 1)]
            else:
                pairs = [(i, j) for i in range(len(members)) for j in range(i + 1, len(members))]
            for i, j in pairs:
                first, second = members[i], members[j]
                if first.key == second.key:
                    continue
                key = ("co-occurrence", *sorted((first.key, second.key)))
                # Closer mentions are more likely related: neighbours weigh 1/2, one entity apart 1/3, and so on.
                weight = 1.0 / (1 + j - i)
                previous = found.get(key)
                if previous is None or weight > previous.weight:
                    found[key] = RelationMention(
                        source=first.name,
                        target=second.name,
                        type=fallback,
                        predicate=COOCCURRENCE_PREDICATE,
                        description=description,
                        weight=weight,
                        chunk_id=chunk_id,
                    )
        # A typed relation says more than co-occurrence of the same pair; keep only the typed one.
        return [
            relation
            for key, relation in found.items()
            if not (key[0] == "co-occurrence" and frozenset(key[1:]) in typed_pairs)
        ]

    def _statements(
        self, text: str, start: int, end: int, members: Sequence[_Span], title_span: _Span | None
    ) -> list[_Statement]:
        """Typed relations text[start:end] states: for each relation phrase, its subject (looked for in the phrase's
        clause, which starts after clause punctuation or the previous phrase) and its list of objects."""
        phrases = self._relation_phrases(text, start, end, members)
        statements = []
        for index, phrase in enumerate(phrases):
            clause_start = phrases[index - 1].end if index else start
            for boundary in _CLAUSE_BREAK.finditer(text, clause_start, phrase.start):
                clause_start = boundary.end()
            subject = _subject(text, clause_start, phrase.start, members, title_span)
            if subject is None:
                continue
            for target in _objects(text, phrase.end, members):
                if target.key != subject.key:
                    source, target = (target, subject) if phrase.reverse else (subject, target)
                    statements.append(_Statement(source, target, phrase.type, phrase.predicate))
        return statements

    def _relation_phrases(self, text: str, start: int, end: int, members: Sequence[_Span]) -> list[_Phrase]:
        """Matches of the relation patterns in text[start:end], in text order. A match inside an entity's name is
        part of the name ("Calls Dashboard"); where matches overlap, the pattern configured first wins."""
        accepted: list[_Phrase] = []
        for regex, relation_type, reverse in self._relation_patterns:
            for match in regex.finditer(text, start, end):
                if any(match.start() < other.end and other.start < match.end() for other in (*members, *accepted)):
                    continue
                predicate = " ".join(match.group(0).split())
                accepted.append(_Phrase(match.start(), match.end(), relation_type, predicate, reverse))
        return sorted(accepted, key=lambda phrase: phrase.start)

    def _title_relations(
        self,
        chunk_id: str,
        title_key: str,
        best: Mapping[str, _Span],
        relations: Sequence[RelationMention],
        entities: Sequence[EntityMention],
    ) -> list[RelationMention]:
        """The title relates to every entity of the chunk that a sentence has not already related it to."""
        endpoints = ((normalize_name(r.source), normalize_name(r.target)) for r in relations)
        linked = {
            target if source == title_key else source for source, target in endpoints if title_key in (source, target)
        }
        descriptions = {normalize_name(entity.name): entity.description for entity in entities}
        title_name = best[title_key].name
        return [
            RelationMention(
                source=title_name,
                target=span.name,
                type=self._ontology.fallback_relationship_type,
                predicate=TITLE_PREDICATE,
                description=descriptions[key],
                weight=TITLE_WEIGHT,
                chunk_id=chunk_id,
            )
            for key, span in best.items()
            if key != title_key and key not in linked
        ]


@dataclass(frozen=True, slots=True)
class PrecomputedResult:
    extractions: list[ChunkExtraction]  # one per input chunk, same order
    quarantined: list[Quarantined]  # records and items that could not be used, with the reason


def precomputed_extractions(
    chunks: Sequence[Chunk], records: Mapping[str, Any], ontology: Ontology
) -> PrecomputedResult:
    """Entities and triples shipped with an evaluation set (``records``: doc_id → extraction.jsonl line) attached to
    the chunks of their documents: an entity to every chunk whose text contains it, a triple to the first chunk
    containing its subject (and its object, if one contains both); either falls back to the document's first chunk."""
    by_doc: dict[str, list[Chunk]] = {}
    for chunk in chunks:
        by_doc.setdefault(chunk.doc_id, []).append(chunk)
    found: dict[str, tuple[dict[str, EntityMention], list[RelationMention]]] = {}
    quarantined: list[Quarantined] = []
    for doc_id, doc_chunks in by_doc.items():
        if doc_id in records:
            document = _PrecomputedDocument(sorted(doc_chunks, key=lambda c: c.position), ontology)
            quarantined.extend(document.add_record(doc_id, records[doc_id]))
            found.update(document.found)
    extractions = [
        ChunkExtraction(chunk.chunk_id, tuple(found[chunk.chunk_id][0].values()), tuple(found[chunk.chunk_id][1]))
        if chunk.chunk_id in found
        else ChunkExtraction(chunk.chunk_id, (), ())
        for chunk in chunks
    ]
    return PrecomputedResult(extractions=extractions, quarantined=quarantined)


class _PrecomputedDocument:
    """One document's chunks, collecting the mentions a precomputed record places in each of them."""

    def __init__(self, chunks: Sequence[Chunk], ontology: Ontology):
        self._chunks = chunks
        self._ontology = ontology
        self._loose_texts = [_loose(chunk.text) for chunk in chunks]
        self.found: dict[str, tuple[dict[str, EntityMention], list[RelationMention]]] = {
            chunk.chunk_id: ({}, []) for chunk in chunks
        }

    def add_record(self, doc_id: str, record: Any) -> list[Quarantined]:
        """Attach the record's entities and triples; returns what had to be skipped, with the reason."""
        quarantined: list[Quarantined] = []

        def reject(reason: str, raw: Any) -> None:
            raw_json = json.dumps(raw, ensure_ascii=False, default=str)
            quarantined.append(Quarantined(stage="extraction", item_id=doc_id, reason=reason, raw=raw_json))

        if not isinstance(record, Mapping):
            reject(f"record is a {type(record).__name__}, not an object", record)
            return quarantined
        missing = [name for name in ("entities", "triples") if not isinstance(record.get(name), list)]
        if missing:
            reject(f"record lacks a list of {' and '.join(missing)}", record)
            return quarantined
        names: list[str] = []
        for item in record["entities"]:
            if not isinstance(item, str) or not normalize_name(item):
                reject("entity is not a non-empty string", item)
                continue
            names.append(" ".join(item.split()))
        triples: list[tuple[str, str, str]] = []
        for item in record["triples"]:
            if not (isinstance(item, list) and len(item) == 3 and all(isinstance(p, str) and p.strip() for p in item)):
                reject("triple is not a list of three non-empty strings", item)
                continue
            subject, predicate, obj = (" ".join(part.split()) for part in item)
            if normalize_name(subject) == normalize_name(obj):
                reject("triple relates an entity to itself", item)
                continue
            triples.append((subject, predicate, obj))
            names.extend((subject, obj))
        for name in names:
            for index in self._containing(name):
                self._attach(name, index)
        for subject, predicate, obj in triples:
            with_subject = self._containing(subject)
            with_object = set(self._containing(obj))
            index = next((i for i in with_subject if i in with_object), with_subject[0])
            # Both ends must be entities of the chunk holding the relation, even when the object is written elsewhere.
            self._attach(subject, index)
            self._attach(obj, index)
            chunk_id = self._chunks[index].chunk_id
            self.found[chunk_id][1].append(
                RelationMention(
                    source=subject,
                    target=obj,
                    type=self._ontology.relationship_type(predicate),
                    predicate=predicate,
                    description=f"{subject} {predicate} {obj}",
                    weight=1.0,
                    chunk_id=chunk_id,
                )
            )
        return quarantined

    def _containing(self, name: str) -> list[int]:
        loose = _loose(name)
        return [i for i, text in enumerate(self._loose_texts) if loose in text] or [0]

    def _attach(self, name: str, index: int) -> None:
        chunk = self._chunks[index]
        entities = self.found[chunk.chunk_id][0]
        key = normalize_name(name)
        if key not in entities:
            entities[key] = EntityMention(
                name=name,
                type=self._ontology.default_entity_type,
                description=_sentence_with(chunk.text, name),
                chunk_id=chunk.chunk_id,
                spotter="precomputed",
            )


def _resolve_overlaps(candidates: Sequence[_Span]) -> list[_Span]:
    """Non-overlapping spans in text order, preferring the stronger spotter, then the longer span."""
    ordered = sorted(candidates, key=lambda s: (_PRIORITY[s.spotter], s.start - s.end, s.start))
    starts: list[int] = []
    ends: list[int] = []
    accepted: list[_Span] = []
    for span in ordered:
        # Accepted spans never overlap, so sorted starts imply sorted ends: only the two neighbours can collide.
        at = bisect.bisect_left(starts, span.start)
        if (at > 0 and ends[at - 1] > span.start) or (at < len(starts) and starts[at] < span.end):
            continue
        starts.insert(at, span.start)
        ends.insert(at, span.end)
        accepted.insert(at, span)
    return accepted


def _subject(
    text: str, clause_start: int, phrase_start: int, members: Sequence[_Span], title_span: _Span | None
) -> _Span | None:
    """The subject of the relation phrase at ``phrase_start``: the nearest entity before it in its clause when only a
    few words (or ", which") separate them; with no entity before it, the title entity if the clause refers to it."""
    before = [span for span in members if clause_start <= span.start and span.end <= phrase_start]
    if before:
        nearest = before[-1]
        gap = _QUOTING.sub(" ", text[nearest.end : phrase_start])
        relative = _RELATIVE_CLAUSE.match(gap)
        return nearest if _is_short_gap(gap[relative.end() :] if relative else gap) else None
    if title_span is not None and _refers_to(_QUOTING.sub(" ", text[clause_start:phrase_start]), title_span):
        return title_span
    return None


def _objects(text: str, phrase_end: int, members: Sequence[_Span]) -> list[_Span]:
    """The objects of the relation phrase ending at ``phrase_end``: the entity a few words after it and the entities
    listed after that one ("B, C and D"). Anything else between them (punctuation, another clause, another verb
    phrase) ends the list."""
    objects: list[_Span] = []
    position = phrase_end
    for span in members:
        if span.start < phrase_end:
            continue
        gap = _QUOTING.sub(" ", text[position : span.start])
        if not (_LIST_SEPARATOR.fullmatch(gap) if objects else _is_short_gap(gap)):
            break
        objects.append(span)
        position = span.end
    return objects


def _is_short_gap(gap: str) -> bool:
    """At most MAX_GAP_WORDS plain words, none of which joins, negates or conditions the statement."""
    words = gap.split()
    return len(words) <= MAX_GAP_WORDS and all(
        _WORD.fullmatch(word) and word.lower() not in _NOT_IN_A_GAP for word in words
    )


def _refers_to(clause_prefix: str, title_span: _Span) -> bool:
    """Whether the words that open a clause before its verb phrase refer to the document's title entity: "it", or
    "the"/"this" and the title's last word ("the service" in a document titled "Cart Service"), then a short gap."""
    words = clause_prefix.lower().split()
    if words[:1] and words[0] in _PRONOUN_REFERENCE:
        rest = words[1:]
    elif len(words) >= 2 and words[0] in _DETERMINER_REFERENCE and words[1] == title_span.name.lower().split()[-1]:
        rest = words[2:]
    else:
        return False
    return _is_short_gap(" ".join(rest))


_TITLE_QUALIFIER = re.compile(r"(?<=\S)\s+\([^()]+\)\s*$")  # "Mercury (planet)", "Vault (service)"


def _clean_bounds(text: str, start: int, end: int) -> tuple[int, int] | None:
    """Span bounds without edge punctuation, a leading determiner or a possessive 's; None if nothing is left."""
    for _ in range(2):  # twice: "the `payments-api`'s" needs punctuation, determiner and possessive stripping
        while start < end and text[start] in _EDGE_CHARS:
            start += 1
        determiner = _LEADING_DETERMINER.match(text, start, end)
        if determiner and determiner.end() < end:
            start = determiner.end()
        if text[start:end].endswith(_POSSESSIVES):
            end -= 2
        while end > start and text[end - 1] in _EDGE_CHARS:
            end -= 1
    return (start, end) if end > start else None


@functools.lru_cache(maxsize=1024)  # a document's chunks arrive together: one compile per title
def _flexible_name_regex(name: str) -> re.Pattern[str]:
    """Whole-word, case-insensitive regex for a name that tolerates spacing differences such as "Person - centered"."""
    words = [r"\s*-\s*".join(re.escape(part) for part in word.split("-")) for word in name.split()]
    return re.compile(_BOUNDARY_BEFORE + r"\s+".join(words) + _BOUNDARY_AFTER, re.IGNORECASE)


def _segments(text: str, limit: int) -> Iterator[tuple[int, str]]:
    """(offset, piece) pieces of at most ``limit`` characters, cut at a paragraph, line, sentence or word break."""
    start = 0
    while start < len(text):
        end = min(start + limit, len(text))
        if end < len(text):
            for separator in ("\n\n", "\n", ". ", " "):
                cut = text.rfind(separator, start + limit // 2, end)
                if cut > start:
                    end = cut + len(separator)
                    break
        yield start, text[start:end]
        start = end


def _split_blocks(text: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    """Sub-sentences of text[start:end] split at markdown block boundaries, without surrounding whitespace."""
    position = start
    for match in [*_BLOCK_BREAK.finditer(text, start, end), None]:
        piece_end = match.start() if match else end
        piece = text[position:piece_end]
        stripped = piece.strip()
        if stripped:
            offset = position + piece.index(stripped[0])
            yield offset, offset + len(stripped)
        if match:
            position = match.end()


def _trim(text: str, limit: int = DESCRIPTION_CHARS) -> str:
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", limit // 2, limit)
    return text[: cut if cut > 0 else limit].rstrip() + "\u2026"


def _loose(text: str) -> str:
    """Case, whitespace and hyphen spacing folded, for "does this chunk contain that name" checks."""
    return re.sub(r"\s*-\s*", "-", " ".join(text.split())).casefold()


def _sentence_with(text: str, name: str) -> str:
    loose = _loose(name)
    for sentence in _PLAIN_SENTENCE_END.split(text):
        if loose in _loose(sentence):
            return _trim(sentence)
    return ""
