"""What a question may ask for, in one place: the retrieval modes, the fusion methods, the result granularities
and the bounds on hops and results. The configuration (its defaults), the query module (its parameters), the CLI,
the HTTP API and the MCP server all take them from here."""

from __future__ import annotations

from typing import Literal, get_args

Mode = Literal["vector", "keyword", "graph", "hybrid", "global"]
MODES: tuple[Mode, ...] = get_args(Mode)
Fusion = Literal["weighted", "rrf"]
FUSIONS: tuple[Fusion, ...] = get_args(Fusion)
Granularity = Literal["documents", "chunks"]
GRANULARITIES: tuple[Granularity, ...] = get_args(Granularity)
MAX_HOPS = 3  # every hop multiplies the graph read; beyond three, a walk reaches most of a connected corpus
MAX_TOP_K = 50  # what one answer may hold over HTTP and MCP (a caller of the query module may ask for more)
