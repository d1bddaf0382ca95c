"""What every source reader provides (``SourceReader``), is given (``ReadContext``) and returns (``SourceScan``)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Protocol, TypeVar

import yaml

from graphrag_pipeline.lib.core.config import BaseSource
from graphrag_pipeline.lib.core.errors import GraphRAGError
from graphrag_pipeline.lib.core.ids import stable_shard
from graphrag_pipeline.lib.core.models import Document, Quarantined

STAGE = "sources"  # the stage named in the quarantine records of every reader
RAW_EXCERPT = 2000  # enough of a bad item to diagnose it without copying huge payloads into the quarantine


@dataclass(frozen=True, slots=True)
class SourceScan:
    """Everything one read of a source yielded.

    ``hashes`` maps every item the source holds (including quarantined, unreadable ones, and, after an incremental
    read, the unchanged items it did not return as documents) to its change hash, so a caller can store it as the
    baseline the next change scan is compared against; an id missing from ``hashes`` is a deleted item.
    """

    documents: tuple[Document, ...]
    quarantined: tuple[Quarantined, ...]
    hashes: dict[str, str] = field(default_factory=dict)
    extractions: dict[str, dict[str, Any]] = field(default_factory=dict)  # doc_id -> {"entities", "triples"}
    revision: str | None = None  # the git commit a folder was read at, when it is a git checkout
    counts: dict[str, int] = field(default_factory=dict)  # figures about the read for the stage's report
    # Quarantined items whose last indexed version must go too: a file that became a link out of its folder, or
    # whose access groups cannot be read, may not keep what an earlier read indexed (an item that merely could not
    # be read this time keeps its last good version).
    withdrawn: frozenset[str] = frozenset()


class SourceMarks(Protocol):
    """Per source and shard, how far an incremental reader got: (modified through, last full read at), ISO 8601
    times. The state store keeps them."""

    def source_marks(self, source: str, shards: Iterable[int]) -> dict[int, tuple[str, str]]: ...

    def record_source_marks(self, source: str, marks: dict[int, tuple[str, str]]) -> None: ...


@dataclass(frozen=True, slots=True)
class ReadContext:
    """What the ingest stage tells a reader: the shards this run brings up to date, where an incremental reader
    keeps its marks, and the change hashes the index holds for those shards' documents. A read without a context
    (tests, one-off reads) is a full read that records nothing."""

    shards: frozenset[int]
    marks: SourceMarks
    shard_count: int
    known: Mapping[str, str] = field(default_factory=dict)  # doc id -> the change hash of its indexed version

    def wants(self, doc_id: str, change_hash: str) -> bool:
        """Whether this run needs the item as a document: in one of its shards and not as the index holds it (its
        hash is all the run needs of any other item; the documents it returns are compared by hash anyway)."""
        return stable_shard(doc_id, self.shard_count) in self.shards and self.known.get(doc_id) != change_hash


SourceT = TypeVar("SourceT", bound=BaseSource, contravariant=True)


class SourceReader(Protocol[SourceT]):
    """One source kind. The registry (``lib.sources.registry``) maps the ``kind`` of a source's configuration to its
    reader."""

    # How often a sensor scans a source of this kind when its configuration sets no ``poll_interval_seconds``.
    default_poll_seconds: int

    def scan(self, source: SourceT) -> dict[str, str]:
        """doc_id -> change hash of every item, as cheaply as the kind allows (sensors call this every poll); equal to
        ``read(source, None).hashes``."""
        ...

    def read(self, source: SourceT, context: ReadContext | None) -> SourceScan:
        """The source's documents: all of them, or, for a reader that reads incrementally and gets a ``context``,
        those modified since its marks for the context's shards."""
        ...


def unreadable_marker(error: OSError) -> str:
    """Stands in for the hash of a file that cannot be read, so that it becoming readable again is a change."""
    return f"unreadable:{error.errno}"


def json_safe(value: Any) -> Any:
    """YAML gives dates, sets and arbitrary keys; payload stores and the Dagster metadata want plain JSON."""
    if isinstance(value, dict):
        return {str(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_safe(item) for item in value]
    if isinstance(value, (dt.date, dt.datetime, dt.time)):
        return value.isoformat()
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


class YamlAliasError(GraphRAGError, yaml.composer.ComposerError):
    """Text a source supplies used a YAML alias."""

    kind = "invalid"


class _UntrustedYamlLoader(yaml.SafeLoader):
    """YAML a document or a catalog entry supplies: no aliases (a few hundred bytes of nested ``*refs`` expand into
    gigabytes once serialized), no duplicate keys (which one wins decides who may read a file)."""

    def compose_node(self, parent, index):  # type: ignore[no-untyped-def]
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise YamlAliasError(None, None, f"YAML aliases (*{event.anchor}) are not accepted here", event.start_mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):  # type: ignore[no-untyped-def]
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_untrusted_yaml(text: str) -> Any:
    """``yaml.safe_load`` for text a source supplies, refusing aliases and duplicate keys (``yaml.YAMLError``)."""
    return yaml.load(text, Loader=_UntrustedYamlLoader)  # noqa: S506 (a SafeLoader)
