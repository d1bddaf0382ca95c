"""Source kind -> reader: the one place in the library that knows every kind's reader. A new kind adds its module
and one line here (and, outside the library's reading code, its configuration model in ``lib.config`` and its
sensor in ``defs/automation/sensors.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from graphrag_pipeline.lib.core.config import BaseSource
from graphrag_pipeline.lib.sources.catalog import CatalogReader
from graphrag_pipeline.lib.sources.confluence import ConfluenceReader
from graphrag_pipeline.lib.sources.eval_set import EvalSetReader
from graphrag_pipeline.lib.sources.folder import FolderReader
from graphrag_pipeline.lib.sources.reader import ReadContext, SourceReader, SourceScan

READERS: dict[str, SourceReader[Any]] = {
    "folder": FolderReader(),
    "eval_set": EvalSetReader(),
    "confluence": ConfluenceReader(),
    "catalog": CatalogReader(),
}


def reader_for(source: BaseSource) -> SourceReader[Any]:
    try:
        return READERS[source.kind]
    except KeyError:
        raise ValueError(f"source {source.name!r}: no reader for kind {source.kind!r}") from None


def read_source(source: BaseSource, context: ReadContext | None = None) -> SourceScan:
    """The source's documents (see ``SourceReader.read``)."""
    return reader_for(source).read(source, context)


def scan_hashes(source: BaseSource) -> dict[str, str]:
    """doc_id -> change hash of every item of the source, read cheaply and equal to ``read_source(source).hashes``:
    the documents' ``content_hash`` for folders, eval sets and catalogs; version markers, fetched without bodies, for
    Confluence."""
    return reader_for(source).scan(source)


def poll_seconds(source: BaseSource) -> int:
    """How often a sensor scans the source: its configured ``poll_interval_seconds``, else its kind's default."""
    if source.poll_interval_seconds is not None:
        return source.poll_interval_seconds
    return reader_for(source).default_poll_seconds


def check_local_paths(sources: Iterable[BaseSource]) -> None:
    """Refuse a build whose folder, eval-set or catalog path does not exist before it creates anything: a first build
    that failed at once used to leave a state without a graph, which every question then took for a running build."""
    for source in sources:
        path = getattr(source, "path", None)
        if path is not None and not Path(path).exists():
            raise FileNotFoundError(f"source {source.name!r}: {path} does not exist")
