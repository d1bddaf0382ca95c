"""The MCP server (the official ``mcp`` SDK): the query module's search and graph exploration as tools for agents.

Same engine and access rule as the HTTP API. The caller's groups come from an API key of the same key ring
(``server.api_keys``, ``$GRAPHRAG_API_KEYS``): over streamable HTTP each request's bearer token is verified and names
the caller; over stdio the process serves the one key in ``$GRAPHRAG_MCP_KEY`` (the agent that spawned it).
"""

from collections.abc import Callable
from typing import Any

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer

from graphrag_pipeline.query import OpenIndex
from graphrag_pipeline.query.explore import entity_neighbourhood, graph_stats
from graphrag_pipeline.query.models import MAX_HOPS, Mode
from graphrag_pipeline.server.auth import Caller, KeyRing

MAX_TOP_K = 50
STDIO_KEY_ENV = "GRAPHRAG_MCP_KEY"


class KeyVerifier:
    """The SDK's ``TokenVerifier`` over the key ring: a bearer token is an API key, its groups ride in the claims."""

    def __init__(self, keys: KeyRing):
        self._keys = keys

    async def verify_token(self, token: str) -> AccessToken | None:
        caller = self._keys.caller(token)
        if caller is None:
            return None
        return AccessToken(token=token, client_id=caller.name, scopes=[], claims={"groups": list(caller.groups)})


def token_caller() -> Caller:
    """The caller of the current streamable-HTTP request (the SDK's bearer middleware refused it without a key)."""
    token = get_access_token()
    if token is None:
        raise PermissionError("no verified API key on this request")
    return Caller(token.client_id, tuple((token.claims or {}).get("groups", ())))


def create_mcp(index: OpenIndex, caller: Callable[[], Caller], *, keys: KeyRing | None = None,
               public_url: str | None = None) -> MCPServer:
    """Tools over one open index, answered for ``caller()``'s groups. ``keys`` and ``public_url`` (the
    ``/mcp`` endpoint's URL) turn on bearer-token verification, for streamable HTTP."""
    auth = {}
    if keys is not None:
        auth = {"token_verifier": KeyVerifier(keys),
                "auth": AuthSettings(issuer_url=public_url, resource_server_url=public_url)}
    server = MCPServer("graphrag_pipeline", instructions=(
        "Search runbooks, wiki pages and service catalogs, and explore the knowledge graph built from them. "
        "Results are limited to what your key may read."), **auth)

    @server.tool()
    def search_knowledge(question: str, mode: Mode = "hybrid", top_k: int = 10, max_hops: int = 2,
                         ) -> dict[str, Any]:
        """Ranked documents for a question, with text, source, entity path, per-signal scores and citations, the
        entities the question names and the facts (typed relationships) behind the results. Modes: hybrid
        (default), vector, keyword, graph, global (community summaries for broad questions)."""
        if not 1 <= top_k <= MAX_TOP_K:
            raise ValueError(f"top_k must be between 1 and {MAX_TOP_K}")
        if not 0 <= max_hops <= MAX_HOPS:
            raise ValueError(f"max_hops must be between 0 and {MAX_HOPS}")
        return index.query(question, mode=mode, top_k=top_k, max_hops=max_hops, groups=caller().groups).to_dict()

    @server.tool()
    def incident_context(subject: str, max_hops: int | None = None) -> dict[str, Any]:
        """The incident context of a service, named or asked about ("alert on payments-api: which services depend
        on it, who owns them, which runbooks apply?"): its dependencies and dependents within max_hops (the blast
        radius, with hops and paths), each one's owners with contacts, runbooks, documents and incidents, and every
        fact with the documents that state it. `markdown` renders it for a prompt."""
        if max_hops is not None and not 0 <= max_hops <= MAX_HOPS:
            raise ValueError(f"max_hops must be between 0 and {MAX_HOPS}")
        if len(subject) > index.settings.server.max_question_chars:
            raise ValueError(f"subject is {len(subject)} characters; at most {index.settings.server.max_question_chars}")
        found = index.context(subject, max_hops=max_hops, groups=caller().groups)
        return {**found.to_dict(), "markdown": found.to_markdown()}

    @server.tool()
    def explore_entity(entity_id: str, limit: int = 50) -> dict[str, Any]:
        """One entity (ids come with search results) with its relationships and the entities at their other ends."""
        found = entity_neighbourhood(index, entity_id, groups=caller().groups, limit=limit)
        if found is None:
            raise ValueError(f"no entity {entity_id!r}")
        return found

    @server.tool()
    def graph_overview() -> dict[str, Any]:
        """How many entities and relationships the graph holds, by type (what your key may see)."""
        return {"version": index.version, **graph_stats(index, groups=caller().groups)}

    return server
