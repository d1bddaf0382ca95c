"""The MCP server (the official ``mcp`` SDK): the query module's search and graph exploration as tools for agents.

Same engine and access rule as the HTTP API. The caller's groups come from an API key of the same key ring
(``server.api_keys``, ``$GRAPHRAG_API_KEYS``): over streamable HTTP each request's bearer token is verified and names
the caller; over stdio the process serves the one key in ``$GRAPHRAG_MCP_KEY`` (the agent that spawned it). The HTTP
API's bounds hold here too (``server.limits``): question length, answers at once in all and per key, and the time
limit, with the work off the event loop; every refusal is a ``ToolError`` whose message the client sees.
"""

from collections.abc import Callable, Mapping
from typing import Annotated, Any, TypeVar

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.types import ToolAnnotations
from pydantic import ConfigDict, Field, ValidationError

from graphrag_pipeline.lib.core.query_options import MAX_HOPS, MAX_TOP_K, Fusion, Granularity, Mode
from graphrag_pipeline.query import OpenIndex
from graphrag_pipeline.query.explore import entity_neighbourhood, graph_stats
from graphrag_pipeline.server.auth import Caller, KeyRing
from graphrag_pipeline.server.limits import AnswerSlots, Busy, TimedOut, check_question

T = TypeVar("T")
READ_ONLY = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)
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
        # An API-key server, not an OAuth resource server: no protected-resource metadata, so a client without a key
        # is told to send a bearer token (401, WWW-Authenticate: Bearer) instead of starting an OAuth flow against
        # an authorization server that does not exist. ``issuer_url`` is required by the settings and names nothing.
        auth = {"token_verifier": KeyVerifier(keys),
                "auth": AuthSettings(issuer_url=public_url, resource_server_url=None)}
    config = index.settings.server
    slots = AnswerSlots(config, "graphrag-mcp")

    async def answer(who: Caller, work: Callable[[], T]) -> T:
        """``work`` under the HTTP API's bounds; every refusal reaches the client as a ``ToolError`` it can read."""
        try:
            return await slots.run(who.name, work)
        except (Busy, TimedOut, ValueError) as error:
            raise ToolError(str(error)) from None

    def checked(text: str, what: str) -> None:  # the schema bounds the length; a blank one passes it
        try:
            check_question(text, config, what)
        except ValueError as error:
            raise ToolError(str(error)) from None

    async def search_knowledge(
        question: Annotated[str, Field(description="the question, in the words of the corpus where possible",
                                       min_length=1, max_length=config.max_question_chars)],
        mode: Annotated[Mode, Field(description="hybrid (default), vector, keyword, graph, or global (community "
                                                "summaries for broad questions)")] = "hybrid",
        top_k: Annotated[int, Field(description="results", ge=1, le=MAX_TOP_K)] = 10,
        max_hops: Annotated[int | None, Field(description="graph hops from the question's entities (default: the "
                                                          "configuration's)", ge=0, le=MAX_HOPS)] = None,
        fusion: Annotated[Fusion | None, Field(description="weighted or rrf (default: the configuration's)")] = None,
        results: Annotated[Granularity | None, Field(description="documents (distinct documents, cited) or chunks "
                                                                 "(default: the configuration's)")] = None,
    ) -> dict[str, Any]:
        """Ranked documents for a question, with text, source, entity path, per-signal scores and citations, the
        entities the question names and the facts (typed relationships) behind the results: the same answer as
        POST /v1/search."""
        who = caller()
        checked(question, "question")
        return await answer(who, lambda: {"index_version": index.version, **index.query(
            question, mode=mode, top_k=top_k, max_hops=max_hops, fusion=fusion, results=results,
            groups=who.groups).to_dict()})

    async def incident_context(
        subject: Annotated[str, Field(description="a service's name, or a question about one",
                                      min_length=1, max_length=config.max_question_chars)],
        max_hops: Annotated[int | None, Field(description="how far dependencies and dependents are followed "
                                                          "(default: the configuration's)", ge=0, le=MAX_HOPS)] = None,
    ) -> dict[str, Any]:
        """The incident context of a service, named or asked about ("alert on payments-api: which services depend
        on it, who owns them, which runbooks apply?"): its dependencies and dependents within max_hops (the blast
        radius, with hops and paths), each one's owners with contacts, runbooks, documents and incidents, and every
        fact with the documents that state it. `markdown` renders it for a prompt."""
        who = caller()
        checked(subject, "subject")

        def context() -> dict[str, Any]:
            found = index.context(subject, max_hops=max_hops, groups=who.groups)
            return {"index_version": index.version, **found.to_dict(), "markdown": found.to_markdown()}

        return await answer(who, context)

    async def explore_entity(
        entity_id: Annotated[str, Field(description="an entity id, as search results and contexts give them")],
        limit: Annotated[int, Field(description="relationships and documents listed at most", ge=1, le=1000)] = 50,
    ) -> dict[str, Any]:
        """One entity (ids come with search results) with its relationships and the entities at their other ends."""
        who = caller()
        found = await answer(who, lambda: entity_neighbourhood(index, entity_id, groups=who.groups, limit=limit))
        if found is None:
            raise ToolError(f"no entity {entity_id!r}")
        return found

    async def graph_overview() -> dict[str, Any]:
        """How many entities and relationships the graph holds, by type (what your key may see)."""
        who = caller()
        return await answer(who, lambda: {"version": index.version, **graph_stats(index, groups=who.groups)})

    tools = [strict_tool(tool) for tool in (search_knowledge, incident_context, explore_entity, graph_overview)]
    return MCPServer("graphrag_pipeline", instructions=(
        "Search runbooks, wiki pages and service catalogs, and explore the knowledge graph built from them. "
        "Results are limited to what your key may read."), tools=tools, **auth)


class StrictTool(Tool):
    """A tool whose arguments are checked before the SDK's own run: a refusal names each wrong argument and the rule
    it breaks, in one line (the SDK sends pydantic's report: types, the input echoed, a documentation link)."""

    async def run(self, arguments: dict[str, Any], context: Any, convert_result: bool = False) -> Any:
        try:
            return await super().run(arguments, context, convert_result=convert_result)
        except ToolError as error:
            # The SDK's refusal of the arguments is a ToolError raised from the ValidationError (a failure after them is
            # an UnexpectedToolError, or the tool's own ToolError, and goes out as it is).
            if type(error) is not ToolError or not isinstance(error.__cause__, ValidationError):
                raise
            problems = error.__cause__.errors()
            raise ToolError(f"{self.name}: " + "; ".join(self._reason(problem) for problem in problems)) from None

    def _reason(self, problem: Mapping[str, Any]) -> str:
        where = ".".join(str(part) for part in problem["loc"]) or "arguments"
        if problem["type"] == "extra_forbidden":
            return f"{where} is not an argument of this tool (it takes {', '.join(self.parameters['properties'])})"
        return f"{where}: {problem['msg'][0].lower()}{problem['msg'][1:]}"


def strict_tool(fn: Callable[..., Any]) -> Tool:
    """A read-only tool that refuses arguments it does not have, as the HTTP API refuses unknown fields (the SDK's
    argument model ignores them: a misspelt ``topk`` would silently answer with the default), and says so in its
    input schema (``additionalProperties: false``)."""
    tool = Tool.from_function(fn, annotations=READ_ONLY)
    loose = tool.fn_metadata.arg_model

    strict = type(loose.__name__, (loose,), {"model_config": ConfigDict(**loose.model_config, extra="forbid")})
    return StrictTool(**{**dict(tool), "fn_metadata": tool.fn_metadata.model_copy(update={"arg_model": strict}),
                         "parameters": {**tool.parameters, "additionalProperties": False}})
