"""The HTTP API (FastAPI): search, index and graph exploration, each answered for the caller's key.

Every answer goes through the query module's functions with the caller's groups (``QueryEngine.query``,
``query.explore``), the same access rule as the CLI and Python callers. Bad input gets a 4xx JSON error that says what
is wrong; nothing answers a traceback. Work runs on a pool of ``max_concurrent_requests`` threads
(``server.limits``, shared with the MCP server): a request beyond that, or beyond its key's
``max_concurrent_requests_per_key``, gets 429 at once (a queue would only turn into timeouts), and one still working
after ``request_timeout_seconds`` answers 504 (its thread finishes and frees its slot).
"""


import json
import logging
import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from graphrag_pipeline.lib.core.config import PipelineSettings
from graphrag_pipeline.lib.core.errors import ErrorKind, GraphRAGError
from graphrag_pipeline.lib.core.query_options import MAX_HOPS, MAX_TOP_K, Fusion, Granularity, Mode
from graphrag_pipeline.query import IncidentContext, OpenIndex, QueryResponse
from graphrag_pipeline.query.explore import (
    ENTITY_ORDERS,
    entity_neighbourhood,
    graph_stats,
    list_entities,
    list_relationships,
)
from graphrag_pipeline.server.auth import Caller, KeyRing
from graphrag_pipeline.server.limits import AnswerSlots, Busy, TimedOut, check_question

ACCESS_LOG = logging.getLogger("graphrag_pipeline.server.access")
ERROR_LOG = logging.getLogger("graphrag_pipeline.server")
PAGE_LIMIT = 1000
# HTTP status of each kind of the pipeline's errors (damaged and failed are answered without their details)
STATUS_OF_KIND: dict[ErrorKind, int] = {"invalid": 400, "busy": 429, "unavailable": 503, "damaged": 503,
                                        "failed": 500}
BEARER = HTTPBearer(auto_error=False, scheme_name="bearer", description="an API key: Authorization: Bearer <key>")
API_KEY_HEADER = APIKeyHeader(name="X-API-Key", auto_error=False, scheme_name="apiKey",
                              description="an API key, as the bearer token is")


class ApiError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


def _whole_number(value: Any) -> Any:
    """JSON Schema counts 2.0 as an integer, so a body may send it for one (a client that builds bodies from floats):
    taken as 2; 2.5, `true` and "5" stay refused (strict types)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def whole_number(low: int, high: int) -> Any:
    """An integer in [low, high] that a whole-number float may stand for. The bounds sit on the integer, before the
    float's conversion, so the OpenAPI document states them as minimum and maximum (after it they were written as
    pydantic's own `ge`/`le`, which no client reads, and schemathesis sent what the server then refused)."""
    return Annotated[int, Field(ge=low, le=high), BeforeValidator(_whole_number)]


def request_models(max_question_chars: int) -> tuple[type[BaseModel], type[BaseModel]]:
    """The bodies of /v1/search and /v1/context, with the configured question length in their schemas."""

    class SearchRequest(BaseModel):
        # Strict: `true` or "5" is no top_k (JSON has numbers for that).
        model_config = ConfigDict(extra="forbid", strict=True)

        # a pattern with one non-blank character: a question of only spaces (a no-break space too) is refused by
        # the schema as by the server
        question: str = Field(min_length=1, max_length=max_question_chars, pattern=r"\S",
                              description="the question, in the words of the corpus where possible")
        mode: Mode = "hybrid"
        top_k: whole_number(1, MAX_TOP_K) | None = Field(None, description="results (default: the configuration's)")
        max_hops: whole_number(0, MAX_HOPS) | None = None
        fusion: Fusion | None = None
        results: Granularity | None = Field(None, description="documents (distinct documents, cited) or chunks")

    class ContextRequest(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)

        subject: str = Field(min_length=1, max_length=max_question_chars, pattern=r"\S",
                             description="a service's name, or a question about one")
        max_hops: whole_number(0, MAX_HOPS) | None = Field(
            None, description="how far dependencies and dependents are followed (default: the configuration's)")

    return SearchRequest, ContextRequest


@dataclass(frozen=True)
class SearchAnswer(QueryResponse):
    """``QueryResponse`` with the index version the question was answered from."""

    index_version: str | None = None


@dataclass(frozen=True)
class ContextAnswer(IncidentContext):
    """``IncidentContext`` with the index version and its Markdown rendering."""

    index_version: str | None = None
    markdown: str = ""


class GraphCounts(BaseModel):
    entities: int
    relationships: int
    chunks_with_mentions: int
    top_entity_types: dict[str, int]
    relationship_types: dict[str, int]


class IndexInfo(BaseModel):
    version: str | None
    embedder: str
    extractor: str
    graph: GraphCounts


class EntityRow(BaseModel):
    id: str
    name: str
    type: str
    mention_count: int
    documents: int = Field(description="documents the caller may read that mention it")
    description: str


class RelationshipRow(BaseModel):
    """A relationship in the shape of a search's facts: source -[type]-> target."""

    id: str
    source: str
    source_id: str
    type: str
    target: str
    target_id: str
    predicates: list[str]
    weight: float
    documents: int = Field(description="documents the caller may read that state it")


class EntityPage(BaseModel):
    offset: int
    limit: int
    order_by: str
    entities: list[EntityRow]


class RelationshipPage(BaseModel):
    offset: int
    limit: int
    relationships: list[RelationshipRow]


class AboutDocument(BaseModel):
    doc_id: str
    title: str
    about: float = Field(description="how strongly the document is about the entity, 0-1")


class Neighbourhood(BaseModel):
    entity: EntityRow
    documents: list[AboutDocument]
    relationships: list[RelationshipRow]


class ErrorBody(BaseModel):
    error: str
    details: list[dict[str, Any]] = []


class Health(BaseModel):
    status: Literal["ok", "ready", "not ready"]
    version: str | None = None


def create_app(index: OpenIndex, settings: PipelineSettings, keys: KeyRing) -> FastAPI:
    """The API over one open index; the caller closes the index after the app stops."""
    config = settings.server
    slots = AnswerSlots(config, "graphrag-serve")
    SearchRequest, ContextRequest = request_models(config.max_question_chars)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        yield
        slots.close()

    app = FastAPI(
        # Swagger UI and ReDoc load their scripts from a CDN, a blank page offline: the document is /openapi.json.
        docs_url=None,
        redoc_url=None,
        title="graphrag_pipeline",
        version="1",
        description="Questions and graph exploration over a graphrag_pipeline index, answered for the caller's key.",
        responses={code: {"model": ErrorBody} for code in (400, 401, 404, 422, 429, 503, 504)},
        lifespan=lifespan,
    )

    async def run(caller: Caller, work: Callable[[], dict[str, Any]]) -> Response:
        """``work``'s answer as JSON, both made in the pool under the caller's slot and the time limit (a large
        answer is serialized there too, not on the event loop), at most ``max_response_bytes`` long."""

        def rendered() -> bytes:
            body = json.dumps(work(), ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
            if len(body) > config.max_response_bytes:
                raise ApiError(500, f"the answer is {len(body)} bytes, over the server's max_response_bytes "
                                    f"({config.max_response_bytes}); ask for fewer results")
            return body

        try:
            return Response(await slots.run(caller.name, rendered), media_type="application/json")
        except Busy as error:
            raise ApiError(429, str(error), {"Retry-After": "1"}) from None
        except TimedOut as error:
            raise ApiError(504, str(error)) from None

    def caller_of(request: Request,
                  # Declared for the OpenAPI document's securitySchemes (either one); read from the headers below.
                  _bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)] = None,
                  _api_key: Annotated[str | None, Depends(API_KEY_HEADER)] = None) -> Caller:
        scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
        presented = credentials.strip() if scheme.lower() == "bearer" else request.headers.get("x-api-key")
        caller = keys.caller(presented)
        if caller is None:
            raise ApiError(401, "an API key is required: Authorization: Bearer <key> or X-API-Key: <key>"
                           if not presented else "unknown API key", {"WWW-Authenticate": "Bearer"})
        request.state.caller = caller.name
        return caller

    Authenticated = Annotated[Caller, Depends(caller_of)]

    @app.middleware("http")
    async def access_log(request: Request, call_next):
        started = time.perf_counter()
        response = await call_next(request)
        record = {"method": request.method, "path": request.url.path, "status": response.status_code,
                  "ms": round((time.perf_counter() - started) * 1000, 1),
                  "caller": getattr(request.state, "caller", None)}
        if config.log_questions and getattr(request.state, "question", None):
            record["question"] = request.state.question
        ACCESS_LOG.info(json.dumps(record))
        return response

    @app.exception_handler(ApiError)
    async def api_error(_request: Request, error: ApiError) -> JSONResponse:
        return JSONResponse({"error": error.message}, status_code=error.status, headers=error.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_request: Request, error: RequestValidationError) -> JSONResponse:
        details = [{"where": ".".join(str(part) for part in e["loc"]),
                    "problem": "is blank" if e["type"] == "string_pattern_mismatch" else e["msg"]}
                   for e in error.errors()]
        return JSONResponse({"error": "invalid request: " + "; ".join(f"{d['where']}: {d['problem']}"
                                                                      for d in details), "details": details},
                            status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, error: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"error": str(error.detail)}, status_code=error.status_code, headers=error.headers)

    @app.exception_handler(GraphRAGError)
    async def pipeline_error(_request: Request, error: GraphRAGError) -> JSONResponse:
        """The pipeline's own errors, answered by their kind."""
        if error.kind == "damaged":
            ERROR_LOG.error(str(error))  # the file and the remedy, for the operator; not for the caller
            return JSONResponse({"error": "the index is damaged: its operator must repair it"}, status_code=503)
        if error.kind == "failed":
            ERROR_LOG.exception("request failed")
            return JSONResponse({"error": f"internal error ({type(error).__name__})"}, status_code=500)
        return JSONResponse({"error": str(error)}, status_code=STATUS_OF_KIND[error.kind])

    @app.exception_handler(ValueError)
    async def refused_value(_request: Request, error: ValueError) -> JSONResponse:
        return JSONResponse({"error": str(error)}, status_code=400)

    @app.exception_handler(Exception)
    async def unexpected(_request: Request, error: Exception) -> JSONResponse:
        ERROR_LOG.exception("request failed")  # the traceback stays in the server's log
        return JSONResponse({"error": f"internal error ({type(error).__name__})"}, status_code=500)

    @app.get("/healthz", response_model=Health, tags=["operations"])
    async def healthz() -> Health:
        """The process answers."""
        return Health(status="ok")

    @app.get("/readyz", response_model=Health, tags=["operations"],
             responses={503: {"model": Health}})
    async def readyz():
        """The index is open and answers questions."""
        try:
            version = index.version
            index.state.document_count()
        except Exception:  # any store failure means not ready; the reason is in the server log
            ERROR_LOG.exception("readiness check failed")
            return JSONResponse(Health(status="not ready").model_dump(), status_code=503)
        return Health(status="ready", version=version)

    @app.post("/v1/search", tags=["search"], response_model=SearchAnswer)
    async def search(body: SearchRequest, caller: Authenticated, request: Request) -> Response:
        """Answer a question: ranked results with text, source, entity path, per-signal scores, hops and citations,
        the linked entities and the facts behind them — only what the caller's groups may read."""
        try:
            check_question(body.question, config)
        except ValueError as error:
            raise ApiError(400, str(error)) from None
        request.state.question = body.question
        def answer() -> dict[str, Any]:
            response = index.query(body.question, mode=body.mode, top_k=body.top_k, max_hops=body.max_hops,
                                   fusion=body.fusion, results=body.results, groups=caller.groups)
            return {"index_version": index.version, **response.to_dict()}  # the version the question opened

        return await run(caller, answer)

    @app.post("/v1/context", tags=["search"], response_model=ContextAnswer)
    async def context(body: ContextRequest, caller: Authenticated) -> Response:
        """The incident context of a service: its dependencies and dependents within max_hops (the blast radius),
        their owners with contacts, runbooks, documents and incidents, and each fact with the documents that state
        it — only what the caller's groups may read; `markdown` renders it for a prompt."""
        try:
            check_question(body.subject, config, "subject")
        except ValueError as error:
            raise ApiError(400, str(error)) from None
        def context_answer() -> dict[str, Any]:
            found = index.context(body.subject, max_hops=body.max_hops, groups=caller.groups)
            return {"index_version": index.version, **found.to_dict(), "markdown": found.to_markdown()}

        return await run(caller, context_answer)

    @app.get("/v1/index", tags=["index"], response_model=IndexInfo)
    async def index_info(caller: Authenticated) -> Response:
        """The index's published version, its models and what the caller can see of it."""
        return await run(caller, lambda: {"version": index.version, "embedder": index.embedder.name,
                                          "extractor": settings.extraction.extractor,
                                          "graph": graph_stats(index, groups=caller.groups)})

    @app.get("/v1/graph", tags=["graph"], response_model=GraphCounts)
    async def graph(caller: Authenticated) -> Response:
        """Counts of the entities and relationships (by type) the caller may see."""
        return await run(caller, lambda: graph_stats(index, groups=caller.groups))

    @app.get("/v1/entities", tags=["graph"], response_model=EntityPage)
    async def entities(caller: Authenticated, offset: Annotated[int, Query(ge=0)] = 0,
                       limit: Annotated[int, Query(ge=1, le=PAGE_LIMIT)] = 50,
                       order_by: Annotated[Literal[ENTITY_ORDERS], Query()] = "mention_count") -> Response:
        """A page of the entities the caller may see."""
        return await run(caller, lambda: list_entities(index, groups=caller.groups, offset=offset, limit=limit,
                                               order_by=order_by))

    @app.get("/v1/relationships", tags=["graph"], response_model=RelationshipPage)
    async def relationships(caller: Authenticated, offset: Annotated[int, Query(ge=0)] = 0,
                            limit: Annotated[int, Query(ge=1, le=PAGE_LIMIT)] = 50) -> Response:
        """A page of the relationships the caller may see."""
        return await run(caller, lambda: list_relationships(index, groups=caller.groups, offset=offset, limit=limit))

    @app.get("/v1/entities/{entity_id}", tags=["graph"], response_model=Neighbourhood)
    async def entity(entity_id: str, caller: Authenticated,
                     limit: Annotated[int, Query(ge=1, le=PAGE_LIMIT)] = 50) -> Response:
        """One entity with its relationships and their other ends, as the caller may see them."""

        def neighbourhood() -> dict[str, Any]:
            found = entity_neighbourhood(index, entity_id, groups=caller.groups, limit=limit)
            if found is None:
                raise ApiError(404, f"no entity {entity_id!r}")
            return found

        return await run(caller, neighbourhood)

    return app
