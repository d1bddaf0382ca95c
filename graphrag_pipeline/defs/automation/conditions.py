"""When the corpus-wide assets follow the shard runs: the automation condition they declare."""

from __future__ import annotations

import functools
import operator

from dagster import AutomationCondition

from graphrag_pipeline.lib.stages import CORPUS_WIDE, PER_DOCUMENT

PER_DOCUMENT_ASSETS = list(PER_DOCUMENT)
CORPUS_WIDE_ASSETS = list(CORPUS_WIDE)

# When a corpus-wide asset follows: a parent was updated since this asset was last requested or updated (or is
# requested on this tick, so the chain goes in one run), and no parent (no shard run) is still running — several shard
# runs landing close together make one corpus-wide run. Unlike `eager()`, shard partitions that were never
# materialized (shards without documents) do not block it.
# The two SINCEs compare times: `since_last_handled()` resets on an "or" of events, which carries no times, so a
# shard run landing on the tick at which the previous corpus-wide run ended (or was requested) counted as handled by
# it, and the change waited for the daily schedule. Each single event here carries its time, and the later one wins.
# They are two SINCEs side by side (a parent update later than the last request AND later than the last update), not
# one nested in the other: a SINCE is a state that stays true until its reset, so as the trigger of an outer SINCE it
# fired again on every tick after the outer reset. The chain run's own parent update (element_summaries after graph
# was requested) then brought graph→… again a tick after the run, then communities→…, then community_summaries.
_PARENT_UPDATED = AutomationCondition.any_deps_match(AutomationCondition.newly_updated())
_PARENT_UPDATED_SINCE_HANDLED = (
    _PARENT_UPDATED.since(AutomationCondition.newly_requested())
    & _PARENT_UPDATED.since(AutomationCondition.newly_updated())
)
# Not while any corpus-wide asset is in a run: an asset that run has already materialized no longer counts as in
# progress, so a shard run landing mid-chain brought element_summaries→graph in a second run beside the first, then
# communities→community_summaries in a third. Waiting for the chain makes the change one more whole-chain run.
_CHAIN_IN_PROGRESS = functools.reduce(operator.or_, (
    AutomationCondition.asset_matches(name, AutomationCondition.in_progress()) for name in CORPUS_WIDE_ASSETS))
FOLLOWS_SHARD_RUNS = (
    (_PARENT_UPDATED_SINCE_HANDLED | AutomationCondition.any_deps_match(AutomationCondition.will_be_requested()))
    & ~AutomationCondition.any_deps_in_progress()
    & ~_CHAIN_IN_PROGRESS.with_label("a corpus-wide asset is in a run")
).with_label("after shard runs")
