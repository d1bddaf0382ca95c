"""Documents are partitioned into hash shards.

A document's shard is a hash of its id (source + path), so it never moves when edited. A fixed, modest number of
shards (64 by default) keeps Dagster's partition count small at any corpus size — 100k documents are ~1.6k per shard —
while a change to one document re-runs one shard, where content hashes make every unchanged document free.
"""

from __future__ import annotations

from dagster import BackfillPolicy, StaticPartitionsDefinition

from graphrag_pipeline.defs.settings import DEFINITION_SETTINGS
from graphrag_pipeline.lib.stages import stage

SHARD_PREFIX = "shard-"


def shard_key(shard: int) -> str:
    return f"{SHARD_PREFIX}{shard:03d}"


def shard_of_key(key: str) -> int:
    if not key.startswith(SHARD_PREFIX):
        raise ValueError(f"not a shard partition key: {key!r}")
    return int(key[len(SHARD_PREFIX):])


def shard_partitions(shard_count: int) -> StaticPartitionsDefinition:
    return StaticPartitionsDefinition([shard_key(i) for i in range(shard_count)])


def shard_backfill_policy(shards_per_run: int | None) -> BackfillPolicy:
    """By default a backfill of many shards is one run over the key range, not one run per shard (runs are the
    expensive unit); with `runs.shards_per_run` it is runs of that many shards, for a run launcher to spread."""
    return BackfillPolicy.single_run() if shards_per_run is None else BackfillPolicy.multi_run(shards_per_run)


def pool(stage_name: str) -> str:
    """The Dagster concurrency pool of a stage's asset: one per per-document stage (so an operator can cap, say,
    concurrent embedding steps to what the embedder server takes) and one shared by the corpus-wide stages, which
    run one at a time anyway (`Stage.execute`); limits are instance settings (deploy/SCALE_OUT.md)."""
    return f"graphrag_{stage_name}" if stage(stage_name).per_document else "graphrag_corpus_wide"


SHARD_COUNT = DEFINITION_SETTINGS.shard_count
SHARDS = shard_partitions(SHARD_COUNT)
SHARD_BACKFILL = shard_backfill_policy(DEFINITION_SETTINGS.runs.shards_per_run)
SINGLE_RUN = BackfillPolicy.single_run()  # the corpus-wide assets: one run, whatever the range
