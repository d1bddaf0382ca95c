"""Change detection for sensors and schedules: which shards' sources differ from what was seen or indexed.

A shard's fingerprint is a hash over the (doc id, content hash) pairs of its documents, so editing, adding or
deleting any document of a shard changes that shard's fingerprint and no other.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Mapping

from graphrag_pipeline.lib.core.config import PipelineSettings
from graphrag_pipeline.lib.core.ids import content_hash, stable_shard
from graphrag_pipeline.lib.sources.registry import scan_hashes

EMPTY_SHARD = "empty"


def source_hashes(settings: PipelineSettings, kind: str | None = None) -> dict[str, str]:
    """doc id → change hash over the configured sources (of one ``kind``, or all), read cheaply: bytes for folders,
    page versions for Confluence."""
    hashes: dict[str, str] = {}
    for source in settings.sources:
        if kind is None or source.kind == kind:
            hashes.update(scan_hashes(source))
    return hashes


def of_sources(hashes: Mapping[str, str], names: set[str]) -> dict[str, str]:
    """The entries of ``hashes`` whose doc id belongs to one of the named sources (ids are ``source:...``)."""
    return {doc_id: digest for doc_id, digest in hashes.items() if doc_id.split(":", 1)[0] in names}


# A fingerprint only tells one shard's contents from its next: 64 bits make a collision 1 in 10^19 per change, and
# keep a sensor's cursor (every shard's fingerprint, shown on the sensor's page) a third of its size with full digests.
FINGERPRINT_HEX_CHARS = 16


def shard_fingerprints(hashes: Mapping[str, str], shard_count: int) -> dict[int, str]:
    by_shard: dict[int, list[str]] = defaultdict(list)
    for doc_id, digest in hashes.items():
        by_shard[stable_shard(doc_id, shard_count)].append(f"{doc_id}\x00{digest}")
    return {shard: content_hash(*sorted(items))[:FINGERPRINT_HEX_CHARS] for shard, items in by_shard.items()}


def changed_shards(current: Mapping[int, str], previous: Mapping[int, str]) -> list[int]:
    """Shards whose fingerprint differs, including shards whose documents were all deleted."""
    shards = set(current) | set(previous)
    return sorted(s for s in shards if current.get(s, EMPTY_SHARD) != previous.get(s, EMPTY_SHARD))
