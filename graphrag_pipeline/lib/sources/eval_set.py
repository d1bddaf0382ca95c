"""Eval-set sources: a benchmark folder with ``corpus.jsonl`` passages and, optionally, ``extraction.jsonl`` with
precomputed entities and triples per passage (the format is in DEVELOPERS.md).

A document's id is the source name plus the passage id. A malformed JSON line becomes a ``Quarantined`` record with
the reason, and the read goes on. Either file may not be a symbolic link out of the folder (``lib.sources.paths``):
such a ``corpus.jsonl`` is quarantined and the set holds no passages.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from graphrag_pipeline.lib.core.config import EvalSetSource
from graphrag_pipeline.lib.core.ids import content_hash
from graphrag_pipeline.lib.core.models import Document, Quarantined
from graphrag_pipeline.lib.sources.paths import check_inside
from graphrag_pipeline.lib.sources.reader import RAW_EXCERPT, STAGE, ReadContext, SourceScan

CORPUS_FILE = "corpus.jsonl"
EXTRACTION_FILE = "extraction.jsonl"


class EvalSetReader:
    """Passages of a benchmark's ``corpus.jsonl``, with its precomputed extraction."""

    default_poll_seconds = 3600  # benchmark sets hardly ever change

    def scan(self, source: EvalSetSource) -> dict[str, str]:
        return read_eval_set(source).hashes  # a passage's hash covers its parsed record: no cheaper scan

    def read(self, source: EvalSetSource, context: ReadContext | None) -> SourceScan:
        return read_eval_set(source)


def read_eval_set(source: EvalSetSource) -> SourceScan:
    """Passages from ``corpus.jsonl`` (``{"id", "title", "text"}`` per line) and optional ``extraction.jsonl``.

    A passage's content hash covers its title, text and precomputed extraction: a change to any of them has to
    reach the graph.
    """
    root = Path(source.path)
    corpus_path = root / CORPUS_FILE
    if refused := check_inside(root, corpus_path, follow_symlinks=source.follow_symlinks):
        item = f"{source.name}:{CORPUS_FILE}"
        return SourceScan(documents=(), quarantined=(Quarantined(STAGE, item, refused.reason),),
                          hashes={item: refused.marker})
    if not corpus_path.is_file():
        raise FileNotFoundError(f"source {source.name!r}: {corpus_path} does not exist")
    quarantined: list[Quarantined] = []
    hashes: dict[str, str] = {}
    passages: dict[str, tuple[str, str, str]] = {}  # doc_id -> (source id, title, text)
    first_line: dict[str, int] = {}
    for line_no, record in _jsonl_records(source, corpus_path, quarantined):
        problem = _corpus_record_problem(record)
        if problem is None:
            doc_id = f"{source.name}:{record['id']}"
            if doc_id in first_line:
                problem = f"duplicate id {record['id']!r} (first on line {first_line[doc_id]})"
        if problem is not None:
            quarantined.append(_line_quarantine(source, corpus_path, line_no, problem, record))
            continue
        first_line[doc_id] = line_no
        passages[doc_id] = (str(record["id"]), record["title"], record["text"])

    extractions: dict[str, dict[str, Any]] = {}
    extraction_path = root / EXTRACTION_FILE
    if refused := check_inside(root, extraction_path, follow_symlinks=source.follow_symlinks):
        item = f"{source.name}:{EXTRACTION_FILE}"
        quarantined.append(Quarantined(STAGE, item, refused.reason))
        hashes[item] = refused.marker
    elif extraction_path.is_file():
        for line_no, record in _jsonl_records(source, extraction_path, quarantined):
            problem = _extraction_record_problem(record)
            if problem is None:
                doc_id = f"{source.name}:{record['id']}"
                if doc_id not in passages:
                    problem = f"extraction for unknown passage id {record['id']!r}"
                elif doc_id in extractions:
                    problem = f"duplicate extraction for passage id {record['id']!r}"
            if problem is not None:
                quarantined.append(_line_quarantine(source, extraction_path, line_no, problem, record))
                continue
            extractions[doc_id] = {
                "entities": list(record["entities"]),
                "triples": [list(triple) for triple in record["triples"]],
            }

    corpus_uri = corpus_path.resolve().as_uri()
    documents: list[Document] = []
    for doc_id, (source_id, title, text) in passages.items():
        extraction = extractions.get(doc_id)
        extraction_key = json.dumps(extraction, sort_keys=True) if extraction is not None else ""
        documents.append(
            Document(
                doc_id=doc_id,
                source=source.name,
                uri=f"{corpus_uri}#{source_id}",
                title=title,
                text=text,
                content_hash=content_hash(title, text, extraction_key),
                metadata={"source_id": source_id},
            )
        )
    return SourceScan(
        documents=tuple(documents),
        quarantined=tuple(quarantined),
        hashes={**hashes, **{document.doc_id: document.content_hash for document in documents}},
        extractions=extractions,
    )


def _jsonl_records(source: EvalSetSource, path: Path, quarantined: list[Quarantined]) -> list[tuple[int, Any]]:
    """(line number, parsed value) for every non-blank line; undecodable lines are quarantined here."""
    records: list[tuple[int, Any]] = []
    with path.open("rb") as handle:
        for line_no, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError as error:
                problem = f"not valid UTF-8 ({error.reason} at byte {error.start})"
                quarantined.append(_line_quarantine(source, path, line_no, problem, None))
                continue
            if not line:
                continue
            try:
                records.append((line_no, json.loads(line)))
            except json.JSONDecodeError as error:
                problem = f"invalid JSON: {error.msg} at column {error.colno}"
                quarantined.append(_line_quarantine(source, path, line_no, problem, line))
    return records


def _identified_record_problem(record: Any, fields: tuple[str, ...]) -> str | None:
    """What is wrong with a line that must be a JSON object with an id and `fields`, or None."""
    if not isinstance(record, dict):
        return f"expected a JSON object, got {type(record).__name__}"
    missing = [key for key in ("id", *fields) if key not in record]
    if missing:
        return f"missing field(s): {', '.join(missing)}"
    if not _valid_id(record["id"]):
        return "field 'id' must be a non-empty string or an integer"
    return None


def _corpus_record_problem(record: Any) -> str | None:
    if problem := _identified_record_problem(record, ("title", "text")):
        return problem
    for key in ("title", "text"):
        if not isinstance(record[key], str):
            return f"field {key!r} must be a string, got {type(record[key]).__name__}"
    return None


def _extraction_record_problem(record: Any) -> str | None:
    if problem := _identified_record_problem(record, ("entities", "triples")):
        return problem
    entities, triples = record["entities"], record["triples"]
    if not isinstance(entities, list) or not all(isinstance(name, str) for name in entities):
        return "field 'entities' must be a list of strings"
    if not isinstance(triples, list):
        return "field 'triples' must be a list"
    for index, triple in enumerate(triples):
        if not (isinstance(triple, list) and len(triple) == 3 and all(isinstance(part, str) for part in triple)):
            return f"triples[{index}] must be a [subject, predicate, object] list of strings"
    return None


def _valid_id(value: Any) -> bool:
    return (isinstance(value, str) and value.strip() != "") or (isinstance(value, int) and not isinstance(value, bool))


def _line_quarantine(source: EvalSetSource, path: Path, line_no: int, problem: str, record: Any) -> Quarantined:
    if record is None:
        raw = ""
    elif isinstance(record, str):
        raw = record
    else:
        raw = json.dumps(record, ensure_ascii=False)
    return Quarantined(
        stage=STAGE,
        item_id=f"{source.name}:{path.name}:{line_no}",
        reason=f"{path.name} line {line_no}: {problem}",
        raw=raw[:RAW_EXCERPT],
    )
