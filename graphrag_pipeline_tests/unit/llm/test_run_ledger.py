"""A budget covers a whole Dagster run: stages in different processes share the run's spend through a ledger."""

from __future__ import annotations

import pytest

from graphrag_pipeline.lib.core.config import PriceSpec
from graphrag_pipeline.lib.llm.accounting import BudgetExceeded, RunLedger, Usage

PRICES = {"m": PriceSpec(prompt_per_million=1_000_000, completion_per_million=1_000_000)}  # $1 per token


def stage(path, run_id: str, budget: float = 10.0) -> Usage:
    return Usage(PRICES, budget, RunLedger(path, run_id))


def test_a_later_stage_is_stopped_by_what_earlier_stages_of_the_run_spent(tmp_path):
    ledger_file = tmp_path / "runs.sqlite"
    extraction = stage(ledger_file, "run-1")
    reserved = extraction.reserve("m", 3, 2)  # worst case $5
    extraction.record_call("m", 3, 3, reserved)  # really cost $6
    assert extraction.cost_usd == 6

    summaries = stage(ledger_file, "run-1")  # a new stage (new process in Dagster), same run
    with pytest.raises(BudgetExceeded, match=r"\$6\.0000 spent"):
        summaries.reserve("m", 3, 2)  # $6 + $5 > $10, although this stage has spent nothing
    assert summaries.reserve("m", 2, 2) == 4  # $6 + $4 fits

    other_run = stage(ledger_file, "run-2")
    assert other_run.reserve("m", 3, 2) == 5  # another run has its own budget


def test_released_and_settled_reservations_free_the_budget(tmp_path):
    first = stage(tmp_path / "runs.sqlite", "run-1")
    held = first.reserve("m", 5, 4)  # $9 in flight
    second = stage(tmp_path / "runs.sqlite", "run-1")
    with pytest.raises(BudgetExceeded, match="in flight"):
        second.reserve("m", 1, 1)  # concurrent stages cannot overspend together
    first.release(held)  # the call failed: nothing billed
    assert second.reserve("m", 5, 4) == 9
