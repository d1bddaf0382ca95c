"""What LLM and embedding calls cost: calls, cache hits, tokens, dollars, failures, retries, and a budget cap.

One ``Usage`` counts the calls of one stage (its clients and threads). The budget is enforced *before* a call: the
call's estimated cost (its prompt estimated from its characters, plus the longest completion it may ask for) is
reserved, and a call whose reservation would take spending past the budget raises ``BudgetExceeded`` without
touching the network. Reservations are held until the call settles, so concurrent calls cannot overspend together.
With a ``RunLedger`` the budget covers a whole Dagster run — every stage, in whatever process it runs — because
reservations and spend are kept in a SQLite table shared by them, updated atomically per call.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from graphrag_pipeline.lib.core.config import PriceSpec
from graphrag_pipeline.lib.core.errors import GraphRAGError

CHARS_PER_TOKEN = 4  # the usual rule of thumb for English text with GPT-style tokenizers


def approximate_tokens(text: str) -> int:
    """Rough token count (characters / 4, at least 1) for budgets and input caps, where no tokenizer is at hand.

    Servers report the real counts after a call; this only has to be close enough to plan with."""
    return len(text) // CHARS_PER_TOKEN + 1


class BudgetExceeded(GraphRAGError, RuntimeError):
    """The next call could take spending past the configured budget; the run should stop cleanly."""

    kind = "busy"


class RunLedger:
    """Reserved and spent dollars of one run, in a SQLite table that every stage process of the run shares."""

    def __init__(self, path: str | Path, run_id: str):
        self.run_id = run_id
        self._connection = sqlite3.connect(str(path), timeout=60, isolation_level=None, check_same_thread=False)
        self._connection.execute(
            "CREATE TABLE IF NOT EXISTS run_spend (run_id TEXT PRIMARY KEY, reserved_usd REAL NOT NULL, "
            "spent_usd REAL NOT NULL)"
        )
        self._lock = threading.Lock()

    def reserve(self, estimate: float, budget_usd: float) -> str | None:
        """Add ``estimate`` to the run's reservations if reserved + spent stays within the budget; else the reason."""
        with self._lock:
            self._connection.execute("BEGIN IMMEDIATE")  # one writer at a time across processes: check and add
            try:
                row = self._connection.execute(
                    "SELECT reserved_usd, spent_usd FROM run_spend WHERE run_id = ?", (self.run_id,)
                ).fetchone()
                reserved, spent = row or (0.0, 0.0)
                if spent + reserved + estimate > budget_usd:
                    return f"${spent:.4f} spent and ${reserved:.4f} in flight in this run"
                self._connection.execute(
                    "INSERT INTO run_spend VALUES (?, ?, 0) ON CONFLICT(run_id) "
                    "DO UPDATE SET reserved_usd = reserved_usd + excluded.reserved_usd",
                    (self.run_id, estimate),
                )
                return None
            finally:
                self._connection.execute("COMMIT")

    def settle(self, reserved: float, spent: float) -> None:
        with self._lock:
            self._connection.execute(
                "UPDATE run_spend SET reserved_usd = max(0, reserved_usd - ?), spent_usd = spent_usd + ? "
                "WHERE run_id = ?",
                (reserved, spent, self.run_id),
            )

    def close(self) -> None:
        self._connection.close()


class Usage:
    """Thread-safe totals for one stage. Counters are plain attributes, written under a lock."""

    def __init__(
        self,
        prices: Mapping[str, PriceSpec] | None = None,
        budget_usd: float | None = None,
        ledger: RunLedger | None = None,
    ):
        self.prices = dict(prices or {})
        self.budget_usd = budget_usd
        self.ledger = ledger
        self.calls = 0  # HTTP calls that returned a usable response
        self.cache_hits = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.cost_usd = 0.0
        self.failures = 0  # outputs or calls given up on (quarantined chunk, summary left extractive)
        self.retries = 0
        self._reserved_usd = 0.0
        self._lock = threading.Lock()

    def cost(self, model: str, prompt_tokens: int, completion_tokens: int) -> float:
        """USD for one call; models missing from the price table cost nothing."""
        price = self.prices.get(model)
        if price is None:
            return 0.0
        return (prompt_tokens * price.prompt_per_million + completion_tokens * price.completion_per_million) / 1e6

    def require_price(self, model: str) -> None:
        """A budget over a model without a price could never stop anything: refuse to start instead."""
        if self.budget_usd is not None and model not in self.prices:
            raise ValueError(f"an LLM budget is set but the price table has no entry for model {model!r}")

    def reserve(self, model: str, prompt_tokens: int, completion_tokens: int) -> float:
        """Hold the worst-case cost of a call about to be made; raises ``BudgetExceeded`` if it might not fit.

        Returns the amount held, to pass to ``record_call`` or ``release`` when the call settles."""
        estimate = self.cost(model, prompt_tokens, completion_tokens)
        with self._lock:
            if self.budget_usd is not None and self.cost_usd + self._reserved_usd + estimate > self.budget_usd:
                raise BudgetExceeded(
                    f"LLM budget ${self.budget_usd:.4f} would be exceeded: ${self.cost_usd:.4f} spent, "
                    f"${self._reserved_usd:.4f} in flight, next call to {model} may cost up to ${estimate:.4f}"
                )
            if self.ledger is not None and self.budget_usd is not None:
                refused = self.ledger.reserve(estimate, self.budget_usd)
                if refused:
                    raise BudgetExceeded(
                        f"LLM budget ${self.budget_usd:.4f} of the run would be exceeded: {refused}, next call to "
                        f"{model} may cost up to ${estimate:.4f}"
                    )
            self._reserved_usd += estimate
        return estimate

    def release(self, reserved_usd: float) -> None:
        """Give back a reservation whose call failed (nothing was billed that we know of)."""
        with self._lock:
            self._reserved_usd = max(0.0, self._reserved_usd - reserved_usd)
            if self.ledger is not None and reserved_usd:
                self.ledger.settle(reserved_usd, 0.0)

    def record_call(self, model: str, prompt_tokens: int, completion_tokens: int, reserved_usd: float = 0.0) -> None:
        cost = self.cost(model, prompt_tokens, completion_tokens)
        with self._lock:
            self._reserved_usd = max(0.0, self._reserved_usd - reserved_usd)
            self.calls += 1
            self.prompt_tokens += prompt_tokens
            self.completion_tokens += completion_tokens
            self.cost_usd += cost
            if self.ledger is not None and (reserved_usd or cost):
                self.ledger.settle(reserved_usd, cost)

    def record_cache_hit(self) -> None:
        with self._lock:
            self.cache_hits += 1

    def record_retry(self) -> None:
        with self._lock:
            self.retries += 1

    def record_failure(self) -> None:
        with self._lock:
            self.failures += 1

    def as_metadata(self, prefix: str = "llm_") -> dict[str, Any]:
        """Plain values for Dagster materialization metadata."""
        with self._lock:
            values: dict[str, Any] = {
                "calls": self.calls,
                "cache_hits": self.cache_hits,
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "cost_usd": round(self.cost_usd, 6),
                "failures": self.failures,
                "retries": self.retries,
            }
            if self.budget_usd is not None:
                values["budget_usd"] = self.budget_usd
        return {f"{prefix}{key}": value for key, value in values.items()}
