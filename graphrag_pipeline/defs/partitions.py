"""Documents are partitioned into hash shards.

A document's shard is a hash of its id (source + path), so it never moves when edited. A fixed, modest number of
shards (64 by default) keeps Dagster's partition count small at any corpus size — 100k documents are ~1.6k per shard —
while a change to one document re-runs one shard, where content hashes make every unchanged document free.
"""

from __future__ import annotations

from dagster import BackfillPolicy, StaticPartitionsDefinition

from graphrag_pipeline.defs.settings import DEFINITION_SETTINGS

SHARD_PREFIX = "shard-"


def shard_key(shard: int) -> str:
    return f"{SHARD_PREFIX}{shard:03d}"


def shard_of_key(key: str) -> int:
    if not key.startswith(SHARD_PREFIX):
        raise ValueError(f"not a shard partition key: {key!r}")
    return int(key[len(SHARD_PREFIX):])


def shard_partitions(shard_count: int) -> StaticPartitionsDefinition:
    return StaticPartitionsDefinition([shard_key(i) for i in range(shard_count)])


SHARD_COUNT = DEFINITION_SETTINGS.shard_count
SHARDS = shard_partitions(SHARD_COUNT)
# A backfill of many shards is one run over the key range, not one run per shard (runs are the expensive unit).
SINGLE_RUN = BackfillPolicy.single_run()
