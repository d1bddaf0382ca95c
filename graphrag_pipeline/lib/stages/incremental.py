"""What every incremental stage does around its algorithm: diff what it wants against what it recorded, and report
only what operators may see."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Changes:
    """The work of an incremental run: the ids whose content changed and the ids that are gone, each sorted."""

    changed: list[str]  # wanted ids whose content hash differs from the recorded one, or that have none recorded
    removed: list[str]  # ids with a recorded hash that are no longer wanted

    @classmethod
    def between(cls, wanted: Mapping[str, str], recorded: Mapping[str, str | None]) -> Changes:
        """``wanted``: id -> the content hash of what the stage produces now; ``recorded``: id -> the hash it
        recorded (None: nothing recorded, as for an id a run is about to produce for the first time)."""
        return cls(
            changed=sorted(i for i, digest in wanted.items() if recorded.get(i) != digest),
            removed=sorted(i for i, digest in recorded.items() if digest is not None and i not in wanted),
        )

    def __bool__(self) -> bool:
        return bool(self.changed or self.removed)


def unrestricted_sample(
    rows: Iterable[tuple[dict[str, Any], Iterable[str]]], restricted: Collection[str], limit: int
) -> list[dict[str, Any]]:
    """A report's sample: the first ``limit`` rows none of whose documents (the second of each pair) is restricted.
    Run metadata is for operators, not for the groups: a name or a title that only restricted documents give stays
    out of it."""
    return [row for row, doc_ids in rows if not any(d in restricted for d in doc_ids)][:limit]
