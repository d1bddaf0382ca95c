"""Confluence pages as ``Document`` records, read over the REST APIs of Confluence Cloud and Data Center.

``base_url`` carries the context path (``https://example.atlassian.net/wiki`` on Cloud,
``https://confluence.example.com`` or ``.../confluence`` on Data Center); the paths below are relative to it. The
source's ``flavor`` picks the API.

Cloud (``flavor: cloud``): Atlassian removed most v1 content endpoints there, so pages come from the v2 API
(``/api/v2``), and v1 is used only for what v2 has no equivalent of:

* ``GET /api/v2/spaces?keys=KEY``: the space's id; no such space in the answer means the space is missing or invisible
  to the token (an error, never an empty space, which would delete its documents).
* ``GET /api/v2/spaces/{id}/pages?status=current&limit=N``: every current page of the space with its id, title,
  ``version.number``, ``version.createdAt`` and ``_links.webui``; a full read adds ``body-format=storage``, the cheap
  change scan never does.
* ``GET /api/v2/pages?id=1,2,...&status=current&body-format=storage``: the pages an incremental read fetches in full.
* ``GET /api/v2/pages/{id}/labels`` and ``GET /api/v2/pages/{id}/ancestors`` for every page read in full. Ancestors
  come as ids and types only, root first; their titles are taken from the space listing, and an ancestor the listing
  lacks (a folder, say) is asked for with ``GET /api/v2/{pages|folders|whiteboards|databases|embeds}/{id}``.
* v1 ``GET /rest/api/content/search?cql=...&expand=version``: the incremental read's ``lastmodified`` query (below).
* v1 ``GET /rest/api/content/{id}/restriction/byOperation/read?expand=restrictions.user,restrictions.group``: the read
  restriction of every page read in full and of each of its ancestors (once per read).

v2 answers are ``{"results": [...], "_links": {"next": "/wiki/api/v2/...?cursor=..."}}`` plus a ``Link: <...>;
rel="next"`` header; either is followed. The ancestors endpoint has no cursor: an answer as long as the ``limit``
asked for continues by asking for the ancestors of its highest ancestor. A full read of a Cloud space therefore
costs the listing plus three requests a page (labels, ancestors, restriction); the sensor's scan costs the listing.

Data Center (``flavor: datacenter``): v1 throughout.

* ``GET /rest/api/content?spaceKey=KEY&type=page&status=current&limit=N&start=S&expand=...``: every current page of
  a space. A full read expands ``CONTENT_EXPAND`` (storage-format body, version, labels, ancestors, the page's and its
  ancestors' read restrictions); the cheap change scan expands ``version`` only, never a body.
* ``GET /rest/api/content/search?cql=...&limit=N&expand=...`` with
  ``space="KEY" and type=page and lastmodified >= "yyyy/MM/dd HH:mm"``: pages modified since a time (incremental).
* ``GET /rest/api/space/KEY``: only when a space lists no page at all, to tell an empty space from a missing or
  invisible one (Confluence answers both with an empty list, which would otherwise delete the space's documents).
* ``GET /rest/api/content/ID?expand=restrictions.read.restrictions.user,restrictions.read.restrictions.group``: only
  for an ancestor whose read restriction neither the answers nor the space listing carried.

v1 pagination follows ``_links.next`` (relative to ``base_url``; CQL search puts a cursor in it), and falls back to
``start`` + ``size`` while full pages come back. Servers may return fewer results than asked for (Cloud caps
``limit`` when bodies are expanded, v2 at ``V2_MAX_LIMIT``); that is handled. Authentication: the token comes from the
environment variable named by ``token_env``; when ``user_env`` names a variable that is set, basic auth
``user:token`` (Cloud: account email + API token), otherwise ``Authorization: Bearer <token>`` (Data Center personal
access token). Credentials are never logged nor put in error messages. 429 and 5xx answers, timeouts and connection
errors are retried (``MAX_ATTEMPTS`` attempts in all, exponential backoff with jitter, a server's ``Retry-After``
honoured up to ``MAX_BACKOFF_SECONDS``); anything else fails the read with a ``ConfluenceError`` naming the source and
the space. A read never returns a partial space: a listing that failed half-way would look like deleted pages.

Documents, the same whichever API they were read over: ``doc_id`` is ``{source.name}:{page id}`` (stable across edits,
moves and renames); ``uri`` is the page's web URL (``base_url`` + ``_links.webui``); ``text`` is the storage-format
XHTML reduced by ``html_text.html_to_text`` (code macros kept as preformatted blocks, macro parameters dropped).
``metadata``: ``space_key``, ``page_id``, ``version``, ``last_modified`` (ISO 8601, UTC), ``labels``, ``ancestors``
(titles, root first), ``ancestor_ids``, ``access_groups`` and ``access_restrictions``. A page that cannot be
understood (no body string, no version, unreadable restrictions, ...) becomes a ``Quarantined`` record for the
sources stage and the read goes on.

Access: Confluence shows a page only to principals allowed by the page's own read restriction *and* by every
restricted ancestor's. ``access_restrictions`` lists those levels (root first, each a sorted list of group names and
``user:<accountId or username>``), exact for a caller that knows group memberships. ``access_groups`` is the flat
list for filtering ("may read if matching any entry"): the principals common to every restricted level (exact when
one level is restricted, otherwise never broader than the truth), ``[NO_COMMON_PRINCIPAL]`` when the levels share no
principal, and the source's configured ``access_groups`` when nothing is restricted (empty: everyone). Space
permissions are not read from the API; the configured ``access_groups`` stand in for them. Only the first page of a
restriction's principals is read (``RESTRICTION_LIMIT``, servers may cap it lower): a longer list admits fewer, never
more. A read restriction without both the ``user`` and the ``group`` block (Cloud's restriction answer, or a Data
Center page whose server did not expand them) quarantines the page rather than reading as "unrestricted".

Change detection: ``content_hash`` covers title, text, labels, ancestors, URL and both access fields, so a permission
change re-ingests the page; version and modification time are metadata only. The hashes in ``SourceScan.hashes`` and
``scan_confluence_hashes`` are *version markers* (derived from the page's version number), identical in both, so a
sensor cursor and the seen-sources baseline compare directly; the cheap scan sees new, edited and deleted pages.
Confluence does not bump the version for restriction or label changes, so those are caught by the next full read
(``read_confluence``), not by the cheap scan.

Incremental reads: ``read_confluence(source, since=t)`` fetches full pages only for pages modified at or after ``t``
(CQL, queried from ``CQL_MARGIN`` earlier because CQL dates are minute-precision wall-clock times in the token
user's time zone, then filtered exactly on ``version.when``), while ``hashes`` still lists every current page from
the cheap listing. The caller must treat a doc id present in ``hashes`` but absent from ``documents`` as unchanged,
not deleted; only ids missing from ``hashes`` are deleted. ``ConfluenceReader`` reads incrementally when the ingest
stage gives it a ``ReadContext``: since the oldest of the run's shards' marks, with a full read when a shard has no
mark or its last full read is ``FULL_READ_INTERVAL`` old (restriction and label changes make no new page version).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import html
import json
import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from graphrag_pipeline.lib.core.config import ConfluenceSource
from graphrag_pipeline.lib.core.errors import GraphRAGError
from graphrag_pipeline.lib.core.http import RetryPolicy, send_with_retries
from graphrag_pipeline.lib.core.ids import content_hash
from graphrag_pipeline.lib.core.models import Document, Quarantined
from graphrag_pipeline.lib.sources.html_text import html_to_text
from graphrag_pipeline.lib.sources.reader import RAW_EXCERPT, STAGE, ReadContext, SourceScan

log = logging.getLogger(__name__)

API = "/rest/api"
API_V2 = "/api/v2"
CONTENT_EXPAND = (
    "body.storage",
    "version",
    "ancestors",
    "metadata.labels",
    "restrictions.read.restrictions.user",
    "restrictions.read.restrictions.group",
    "ancestors.restrictions.read.restrictions.user",
    "ancestors.restrictions.read.restrictions.group",
)
LISTING_EXPAND = ("version",)
RESTRICTION_EXPAND = ("restrictions.user", "restrictions.group")
RESTRICTION_LIMIT = 200  # principals per kind read from one restriction
V2_MAX_LIMIT = 250  # the largest page size the v2 API accepts
# v2 collection of each content type an ancestor can have (the path its title and its own ancestors are read from)
V2_COLLECTIONS = {"page": "pages", "folder": "folders", "whiteboard": "whiteboards", "database": "databases",
                  "embed": "embeds"}
MAX_ATTEMPTS = 3
BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 30.0
CQL_MARGIN = dt.timedelta(days=1)  # covers any user time zone (UTC-12 .. UTC+14), clock skew and minute truncation
FULL_READ_INTERVAL = dt.timedelta(days=1)  # restriction and label changes make no new page version: re-read all daily
NO_COMMON_PRINCIPAL = "confluence:no-common-principal"  # matches nobody: nested restrictions with disjoint principals
_ERROR_EXCERPT = 300


class ConfluenceError(GraphRAGError, RuntimeError):
    """The Confluence API could not be used: configuration, authentication, permissions, an unusable answer."""

    kind = "unavailable"

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status  # the HTTP status when the server refused the request


class ConfluenceClient:
    """A small client for the REST API subset above. Use as a context manager, or call ``close``."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        flavor: str = "cloud",
        user: str | None = None,
        page_limit: int = 50,
        timeout_seconds: float = 30,
        source_name: str = "confluence",
        auth_hint: str = "",
        max_attempts: int = MAX_ATTEMPTS,
        backoff_seconds: float = BACKOFF_SECONDS,
        max_backoff_seconds: float = MAX_BACKOFF_SECONDS,
        sleep: Callable[[float], None] = time.sleep,  # injectable so tests can see the waits without waiting
    ):
        if flavor not in ("cloud", "datacenter"):
            raise ValueError(f"flavor must be 'cloud' or 'datacenter', not {flavor!r}")
        self.base_url = base_url.rstrip("/")
        parts = urlsplit(self.base_url)
        self._origin = f"{parts.scheme}://{parts.netloc}"
        self._context = parts.path.rstrip("/")  # "/wiki", "/confluence" or ""
        self.flavor = flavor
        self.page_limit = page_limit
        self._v2_limit = min(page_limit, V2_MAX_LIMIT)
        self.source_name = source_name
        self._auth_hint = auth_hint
        self._retry = RetryPolicy(max(1, max_attempts), backoff_seconds, max_backoff_seconds)
        self._sleep = sleep
        auth: httpx.Auth | None = httpx.BasicAuth(user, token) if user else None
        headers = {"Accept": "application/json"}
        if not user:
            headers["Authorization"] = f"Bearer {token}"
        # No redirects: credentials go to base_url's host only, and a redirect means base_url needs fixing.
        self._http = httpx.Client(auth=auth, headers=headers, timeout=timeout_seconds, follow_redirects=False)

    @classmethod
    def from_source(
        cls,
        source: ConfluenceSource,
        *,
        environ: Mapping[str, str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> "ConfluenceClient":
        """A client for a ``kind: confluence`` source, with the credentials its environment variables hold."""
        env = os.environ if environ is None else environ
        token = env.get(source.token_env, "")
        if not token:
            raise ConfluenceError(
                f"Confluence source {source.name!r}: environment variable {source.token_env} is not set; it must hold "
                f"the API token ({'Cloud API token' if source.flavor == 'cloud' else 'personal access token'})"
            )
        user = env.get(source.user_env) if source.user_env else None
        if user:
            hint = f"basic auth as ${source.user_env} with the token in ${source.token_env}"
        else:
            hint = f"Bearer token from ${source.token_env}"
            if source.flavor == "cloud":
                hint += f"; Cloud API tokens need the account email in ${source.user_env or 'user_env'}"
        return cls(
            source.base_url,
            token,
            flavor=source.flavor,
            user=user or None,
            page_limit=source.page_limit,
            timeout_seconds=source.timeout_seconds,
            source_name=source.name,
            auth_hint=hint,
            sleep=sleep,
        )

    def __enter__(self) -> "ConfluenceClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # --------------------------------------------------------------------------------------------- both flavors

    def page_versions(self, space: str) -> dict[str, int | None]:
        """page id -> version number of every current page of ``space``, without bodies (the cheap listing).

        Raises ``ConfluenceError`` when the space is missing or the credentials cannot see it.
        """
        if self.flavor == "cloud":
            return _versions(self.space_pages(self.space_id(space), space, bodies=False))
        versions = _versions(self.pages(space, expand=LISTING_EXPAND))
        if not versions:
            self.check_space(space)
        return versions

    def pages_modified_since(
        self, space: str, since: dt.datetime, *, expand: tuple[str, ...] = CONTENT_EXPAND
    ) -> Iterator[Any]:
        """Current pages of ``space`` whose last modification (``version.when``) is at or after ``since`` (v1 CQL).

        A naive ``since`` is taken as UTC. The CQL query starts ``CQL_MARGIN`` earlier (CQL compares minute-precision
        wall-clock times in the token user's time zone); the exact cut is made here on ``version.when``, so
        ``expand`` must include ``version``. Pages whose time cannot be read are yielded too, so the reader can
        quarantine them instead of losing them silently.
        """
        since_utc = _as_utc(since)
        cql_from = (since_utc - CQL_MARGIN).strftime("%Y/%m/%d %H:%M")
        params = {
            "cql": f'space="{_cql_escape(space)}" and type=page and lastmodified >= "{cql_from}"',
            "limit": str(self.page_limit),
            "start": "0",
            "expand": ",".join(expand),
        }
        for page in self._paginate(f"{API}/content/search", params, space):
            when = _version_time(page, "when")
            if when is None or when >= since_utc:
                yield page

    # ------------------------------------------------------------------------------------------ Data Center (v1)

    def pages(self, space: str, *, expand: tuple[str, ...] = CONTENT_EXPAND) -> Iterator[Any]:
        """Every current page of ``space`` as the v1 API returns it (JSON objects), with ``expand`` expanded."""
        params = {
            "spaceKey": space,
            "type": "page",
            "status": "current",
            "limit": str(self.page_limit),
            "start": "0",
            "expand": ",".join(expand),
        }
        yield from self._paginate(f"{API}/content", params, space)

    def check_space(self, space: str) -> None:
        """Raise ``ConfluenceError`` unless ``space`` exists and the credentials can see it (v1)."""
        try:
            self._get_json(f"{self.base_url}{API}/space/{space}", None, space)
        except ConfluenceError as error:
            if error.status == 404:
                raise ConfluenceError(
                    f"Confluence source {self.source_name!r}, space {space!r}: the space does not exist or the "
                    f"credentials cannot see it (GET {API}/space/{space} answered 404)"
                ) from error
            raise

    def content_read_principals(self, page_id: str, space: str) -> frozenset[str] | None:
        """Who the read restriction of one page admits (None: unrestricted), for ancestors the answers left out."""
        params = {"expand": "restrictions.read.restrictions.user,restrictions.read.restrictions.group"}
        data = self._get_json(f"{self.base_url}{API}/content/{page_id}", params, space)
        try:
            return _read_principals(data)
        except _Malformed as problem:
            raise ConfluenceError(
                f"Confluence source {self.source_name!r}, space {space!r}: read restrictions of page {page_id} "
                f"cannot be read: {problem}"
            ) from problem

    # ------------------------------------------------------------------------------------------------ Cloud (v2)

    def space_id(self, space: str) -> str:
        """The v2 id of the space with key ``space``; ``ConfluenceError`` when it is missing or invisible."""
        url = f"{self.base_url}{API_V2}/spaces"
        for entry in self._results(self._get_json(url, {"keys": space}, space), url, space):
            if isinstance(entry, dict) and entry.get("key") == space and _page_id(entry) is not None:
                return str(_page_id(entry))
        raise ConfluenceError(
            f"Confluence source {self.source_name!r}, space {space!r}: the space does not exist or the credentials "
            f"cannot see it (GET {API_V2}/spaces?keys={space} did not list it)"
        )

    def space_pages(self, space_id: str, space: str, *, bodies: bool) -> Iterator[Any]:
        """Every current page of the space with v2 id ``space_id``, with storage-format bodies when ``bodies``."""
        params = {"status": "current", "limit": str(self._v2_limit)}
        if bodies:
            params["body-format"] = "storage"
        yield from self._paginate_v2(f"{API_V2}/spaces/{space_id}/pages", params, space)

    def pages_by_id(self, page_ids: list[str], space: str) -> Iterator[Any]:
        """The current pages with these ids, with storage-format bodies (v2 takes at most a page size of ids)."""
        for start in range(0, len(page_ids), self._v2_limit):
            params = {
                "id": ",".join(page_ids[start : start + self._v2_limit]),
                "status": "current",
                "body-format": "storage",
                "limit": str(self._v2_limit),
            }
            yield from self._paginate_v2(f"{API_V2}/pages", params, space)

    def page_labels(self, page_id: str, space: str) -> list[Any]:
        """The label objects (``id``, ``name``, ``prefix``) of one page."""
        return list(self._paginate_v2(f"{API_V2}/pages/{page_id}/labels", {"limit": str(self._v2_limit)}, space))

    def page_ancestors(self, page_id: str, space: str) -> list[Any]:
        """The ancestors (``id``, ``type``) of one page, root first.

        The endpoint answers the nearest ``limit`` ancestors; an answer that long may have more above it, which are
        the ancestors of its highest one (asked for under that ancestor's type).
        """
        chain: list[Any] = []
        path = f"{API_V2}/pages/{page_id}/ancestors"
        asked = {page_id}
        while True:
            url = f"{self.base_url}{path}"
            results = self._results(self._get_json(url, {"limit": str(self._v2_limit)}, space), url, space)
            chain = results + chain
            if len(results) < self._v2_limit:
                return chain
            top = results[0] if isinstance(results[0], dict) else {}
            top_id, collection = _page_id(top), V2_COLLECTIONS.get(str(top.get("type")))
            if top_id is None or collection is None or top_id in asked:
                raise ConfluenceError(
                    f"Confluence source {self.source_name!r}, space {space!r}: the ancestors of page {page_id} cannot "
                    f"be followed past {json.dumps(top)[:_ERROR_EXCERPT]}"
                )
            asked.add(top_id)
            path = f"{API_V2}/{collection}/{top_id}/ancestors"

    def content(self, content_type: str, content_id: str, space: str) -> dict[str, Any]:
        """One v2 content object (page, folder, ...) without its body: for the title of an ancestor."""
        return self._get_json(f"{self.base_url}{API_V2}/{V2_COLLECTIONS[content_type]}/{content_id}", None, space)

    def read_restriction(self, content_id: str, space: str) -> dict[str, Any]:
        """The read restriction of one content object as v1 answers it (Cloud's v2 has none)."""
        params = {"expand": ",".join(RESTRICTION_EXPAND), "limit": str(RESTRICTION_LIMIT)}
        return self._get_json(f"{self.base_url}{API}/content/{content_id}/restriction/byOperation/read", params, space)

    # ----------------------------------------------------------------------------------------------------- requests

    def _paginate(self, path: str, params: dict[str, str], space: str) -> Iterator[Any]:
        """A v1 listing: ``_links.next`` when given, else ``start`` + ``size`` while full pages come back."""
        url: str = f"{self.base_url}{path}"
        query: dict[str, str] | None = params
        start = 0
        followed: set[str] = set()
        while True:
            data, _ = self._fetch(url, query, space)
            results = self._results(data, url, space)
            yield from results
            next_link = _dig(data, "_links", "next")
            if isinstance(next_link, str) and next_link:
                url, query = self._follow(next_link, followed, space), None
                continue
            # No next link: page by start/size while the server keeps returning full pages.
            size = data.get("size") if isinstance(data.get("size"), int) else len(results)
            limit = data.get("limit") if isinstance(data.get("limit"), int) else int(params["limit"])
            if not results or size <= 0 or size < limit:
                return
            start = (data.get("start") if isinstance(data.get("start"), int) else start) + size
            url, query = f"{self.base_url}{path}", {**params, "start": str(start)}

    def _paginate_v2(self, path: str, params: dict[str, str], space: str) -> Iterator[Any]:
        """A v2 listing: the cursor URL in ``_links.next``, else in the ``Link`` header; neither means the end."""
        url: str = f"{self.base_url}{path}"
        query: dict[str, str] | None = params
        followed: set[str] = set()
        while True:
            data, link_next = self._fetch(url, query, space)
            yield from self._results(data, url, space)
            next_link = _dig(data, "_links", "next")
            if not (isinstance(next_link, str) and next_link):
                next_link = link_next
            if not next_link:
                return
            url, query = self._follow(next_link, followed, space), None

    def _follow(self, link: str, followed: set[str], space: str) -> str:
        url = self._resolve(link, space)
        if url in followed:
            raise ConfluenceError(f"Confluence source {self.source_name!r}, space {space!r}: pagination loops at {url}")
        followed.add(url)
        return url

    def _results(self, data: dict[str, Any], url: str, space: str) -> list[Any]:
        results = data.get("results")
        if not isinstance(results, list):
            raise ConfluenceError(
                f"Confluence source {self.source_name!r}, space {space!r}: GET {url} answered without a "
                f"'results' list: {json.dumps(data)[:_ERROR_EXCERPT]}"
            )
        return results

    def _resolve(self, link: str, space: str) -> str:
        """A next-page link as an absolute URL on this server (v1 links are relative to ``base_url``, v2 links and
        ``Link`` headers include the context path)."""
        parts = urlsplit(link)
        if parts.scheme or parts.netloc:
            if f"{parts.scheme}://{parts.netloc}" != self._origin:
                # Never send the credentials to another host.
                raise ConfluenceError(
                    f"Confluence source {self.source_name!r}, space {space!r}: next page link points to another "
                    f"host: {link}"
                )
            return link
        if not link.startswith("/"):
            link = "/" + link
        if self._context and link.startswith((f"{self._context}{API}/", f"{self._context}{API_V2}/")):
            return self._origin + link
        return self.base_url + link

    def _get_json(self, url: str, params: dict[str, str] | None, space: str) -> dict[str, Any]:
        return self._fetch(url, params, space)[0]

    def _fetch(self, url: str, params: dict[str, str] | None, space: str) -> tuple[dict[str, Any], str | None]:
        """The JSON object a GET answers, and the URL of its ``Link: <...>; rel="next"`` header if any."""
        where = f"Confluence source {self.source_name!r}, space {space!r}"

        def retrying(retry: int, error: str, wait: float) -> None:
            log.warning("%s: GET %s failed (%s); retry %d/%d in %.2fs", where, url, error, retry,
                        self._retry.attempts - 1, wait)

        try:
            attempts = send_with_retries(lambda: self._http.get(url, params=params), self._retry, sleep=self._sleep,
                                         on_retry=retrying, excerpt_chars=_ERROR_EXCERPT)
        except httpx.RequestError as error:
            raise ConfluenceError(f"{where}: GET {url} failed: {type(error).__name__}: {error}") from error
        response = attempts.response
        if response is None:
            raise ConfluenceError(f"{where}: GET {url} failed after {self._retry.attempts} attempts: "
                                  f"{attempts.last_error}")
        if response.is_success:
            try:
                data = response.json()
            except ValueError as error:
                raise ConfluenceError(
                    f"{where}: GET {url} answered HTTP {response.status_code} with a body that is not JSON: "
                    f"{response.text[:_ERROR_EXCERPT]!r}"
                ) from error
            if not isinstance(data, dict):
                raise ConfluenceError(f"{where}: GET {url} answered JSON that is not an object")
            return data, response.links.get("next", {}).get("url")
        status, excerpt = response.status_code, response.text[:_ERROR_EXCERPT]
        if status in (401, 403):
            what = "authentication failed" if status == 401 else "permission denied"
            raise ConfluenceError(
                f"{where}: {what} (HTTP {status} from GET {url}); credentials used: {self._auth_hint}. "
                f"Server said: {excerpt}",
                status,
            )
        raise ConfluenceError(f"{where}: GET {url} was rejected with HTTP {status}: {excerpt}", status)


# ---------------------------------------------------------------------------------------------------------- readers


class ConfluenceReader:
    """Pages of Confluence spaces; in an ingest run, only the pages modified since the run's shards were read."""

    default_poll_seconds = 300  # a scan lists every page of every space: API calls, not a directory walk

    def scan(self, source: ConfluenceSource) -> dict[str, str]:
        return scan_confluence_hashes(source)

    def read(self, source: ConfluenceSource, context: ReadContext | None) -> SourceScan:
        return read_confluence(source) if context is None else read_incrementally(source, context)


def read_incrementally(source: ConfluenceSource, context: ReadContext) -> SourceScan:
    """Read only what changed since the context's shards' marks (full read when a shard has none or its last full
    read is a day old), then advance the marks of exactly these shards: another run's shards keep theirs."""
    now = dt.datetime.now(dt.timezone.utc)
    marks = context.marks.source_marks(source.name, context.shards)
    full = len(marks) < len(context.shards) or any(
        now - dt.datetime.fromisoformat(full_read_at) > FULL_READ_INTERVAL for _, full_read_at in marks.values()
    )
    since = None if full else min(dt.datetime.fromisoformat(through) for through, _ in marks.values())
    scan = read_confluence(source, since=since)
    modified = [dt.datetime.fromisoformat(d.metadata["last_modified"]) for d in scan.documents]
    through = max([*modified, *([since] if since else [])], default=None)
    if through is not None:
        full_read_at = now.isoformat() if full else None
        context.marks.record_source_marks(source.name, {
            shard: (through.isoformat(), full_read_at or marks[shard][1]) for shard in context.shards
        })
    return dataclasses.replace(scan, counts={"incremental": int(not full)})


def read_confluence(
    source: ConfluenceSource, *, since: dt.datetime | None = None, client: ConfluenceClient | None = None
) -> SourceScan:
    """Pages of every configured space as documents (all of them, or with ``since`` only those modified since then).

    ``hashes`` always maps every current page to its version marker (see the module docstring): with ``since``, ids
    in ``hashes`` but not in ``documents`` are unchanged pages, not deleted ones. Raises ``ConfluenceError`` when a
    space cannot be read completely.
    """
    own_client = client is None
    client = client or ConfluenceClient.from_source(source)
    documents: list[Document] = []
    quarantined: list[Quarantined] = []
    hashes: dict[str, str] = {}
    try:
        for space in source.spaces:
            read_space = _read_cloud_space if client.flavor == "cloud" else _read_datacenter_space
            pages, describe, versions = read_space(client, space, since)
            hashes.update({f"{source.name}:{pid}": version_marker(number) for pid, number in versions.items()})
            for index, page in enumerate(pages):
                page_id = _page_id(page)
                item_id = f"{source.name}:{page_id}" if page_id is not None else f"{source.name}:{space}:#{index}"
                try:
                    documents.append(_page_document(source, client.base_url, space, describe(page)))
                except _Malformed as problem:
                    quarantined.append(
                        Quarantined(
                            stage=STAGE,
                            item_id=item_id,
                            reason=f"Confluence page in space {space!r}: {problem}",
                            raw=json.dumps(page, ensure_ascii=False, default=str)[:RAW_EXCERPT],
                        )
                    )
    finally:
        if own_client:
            client.close()
    return SourceScan(documents=tuple(documents), quarantined=tuple(quarantined), hashes=hashes)


def scan_confluence_hashes(source: ConfluenceSource, *, client: ConfluenceClient | None = None) -> dict[str, str]:
    """Cheap change scan for sensors: doc_id -> version marker of every current page, no bodies fetched.

    The values equal ``read_confluence(source).hashes``; a page missing from the result has been deleted (or moved
    out of the configured spaces, or hidden from the token).
    """
    own_client = client is None
    client = client or ConfluenceClient.from_source(source)
    hashes: dict[str, str] = {}
    try:
        for space in source.spaces:
            versions = client.page_versions(space)
            hashes.update({f"{source.name}:{pid}": version_marker(number) for pid, number in versions.items()})
    finally:
        if own_client:
            client.close()
    return hashes


def version_marker(number: int | None) -> str:
    """The change-scan hash of a page: derived from its version number alone."""
    return content_hash("confluence-version", str(number)) if number is not None else "unversioned"


class _Malformed(ValueError):
    """A page record this reader cannot turn into a document."""


# The principals a content object's read restriction admits: None when unrestricted, the problem when unreadable.
_Principals = frozenset[str] | None | _Malformed


@dataclass(frozen=True)
class _Page:
    """One page as a document needs it, whichever API described it."""

    id: str
    title: str
    body: str
    version: int
    modified: dt.datetime
    webui: Any
    labels: list[str]
    ancestors: list[tuple[str, str]]  # (id, title), root first
    levels: list[frozenset[str]]  # the restricted levels' principals: ancestors root first, then the page's own


def _read_datacenter_space(
    client: ConfluenceClient, space: str, since: dt.datetime | None
) -> tuple[list[Any], Callable[[Any], _Page], dict[str, int | None]]:
    """v1: the pages to turn into documents, how to describe one, and every current page's version."""
    if since is None:
        pages = list(client.pages(space))
        if not pages:
            client.check_space(space)
        versions = _versions(pages)
    else:
        versions = client.page_versions(space)
        pages = list(client.pages_modified_since(space, since))
        for page_id, number in _versions(pages).items():  # created between the listing and the search
            versions.setdefault(page_id, number)
    principals = _principals_by_id(client, space, pages)
    return pages, lambda page: _v1_page(page, principals), versions


def _read_cloud_space(
    client: ConfluenceClient, space: str, since: dt.datetime | None
) -> tuple[list[Any], Callable[[Any], _Page], dict[str, int | None]]:
    """v2 pages, labels and ancestors, v1 CQL and restrictions: as ``_read_datacenter_space``."""
    space_id = client.space_id(space)
    listing = list(client.space_pages(space_id, space, bodies=since is None))
    if since is None:
        pages = listing
    else:
        modified = [
            page_id
            for page in client.pages_modified_since(space, since, expand=LISTING_EXPAND)
            if (page_id := _page_id(page)) is not None
        ]
        pages = list(client.pages_by_id(modified, space))
    versions = _versions(listing)
    for page_id, number in _versions(pages).items():  # created between the listing and the search
        versions.setdefault(page_id, number)

    page_ids = [page_id for page in pages if (page_id := _page_id(page)) is not None]
    # One request per page for each of these: a page deleted since the listing answers 404 and is then gone, as if
    # the listing had not named it (the next read would not), instead of failing the read of the whole space.
    labels, ancestors, gone = {}, {}, set()
    for page_id in page_ids:
        try:
            labels[page_id] = client.page_labels(page_id, space)
            ancestors[page_id] = client.page_ancestors(page_id, space)
        except ConfluenceError as error:
            if error.status != 404:
                raise
            gone.add(page_id)
    if gone:
        pages = [page for page in pages if _page_id(page) not in gone]
        page_ids = [page_id for page_id in page_ids if page_id not in gone]
        versions = {page_id: number for page_id, number in versions.items() if page_id not in gone}
    # Ancestors come without titles: the listing has every page's; others (folders, ...) are asked for. A type
    # this reader does not know keeps an empty title; its restriction is still read below.
    titles = {page_id: page.get("title") for page in [*listing, *pages] if (page_id := _page_id(page)) is not None}
    ancestor_ids: list[str] = []
    for chain in ancestors.values():
        for ancestor in chain:
            ancestor_id = _page_id(ancestor)
            if ancestor_id is None:
                continue  # _v2_page quarantines the page
            ancestor_ids.append(ancestor_id)
            ancestor_type = str(ancestor.get("type"))
            if ancestor_id not in titles and ancestor_type in V2_COLLECTIONS:
                titles[ancestor_id] = client.content(ancestor_type, ancestor_id, space).get("title")
    principals: dict[str, _Principals] = {}
    for content_id in dict.fromkeys([*page_ids, *ancestor_ids]):
        try:
            principals[content_id] = _restriction_principals(client.read_restriction(content_id, space))
        except _Malformed as problem:
            principals[content_id] = problem
        except ConfluenceError as error:
            if error.status != 404:
                raise
            # A page of this read that vanished is gone (as above); pages below content whose restriction cannot be
            # read (a deleted parent, a folder the v1 API does not know) have unknown readers: they are quarantined,
            # never opened to everyone.
            principals[content_id] = _Malformed(f"content {content_id}: its read restriction answered 404")
            if content_id in page_ids:
                gone.add(content_id)
    if gone:
        pages = [page for page in pages if _page_id(page) not in gone]
        versions = {page_id: number for page_id, number in versions.items() if page_id not in gone}
    return pages, lambda page: _v2_page(page, labels, ancestors, titles, principals), versions


def _versions(pages: Iterable[Any]) -> dict[str, int | None]:
    return {page_id: _version_number(page) for page in pages if (page_id := _page_id(page)) is not None}


# ------------------------------------------------------------------------------------------------------------ pages

_CDATA = re.compile(r"<!\[CDATA\[(.*?)\]\]>", re.DOTALL)
_PLAIN_TEXT_BODY = re.compile(
    r"<ac:plain-text-body\b[^>]*>\s*<!\[CDATA\[(.*?)\]\]>\s*</ac:plain-text-body>", re.DOTALL | re.IGNORECASE
)
_MACRO_PARAMETER = re.compile(r"<ac:parameter\b[^>]*>.*?</ac:parameter>", re.DOTALL | re.IGNORECASE)


def storage_to_text(storage: str) -> str:
    """Readable text of a storage-format (XHTML) body: code macros as preformatted blocks, CDATA kept as text."""
    xhtml = _MACRO_PARAMETER.sub("", storage)
    xhtml = _PLAIN_TEXT_BODY.sub(lambda match: f"<pre>{html.escape(match.group(1))}</pre>", xhtml)
    xhtml = _CDATA.sub(lambda match: html.escape(match.group(1)), xhtml)
    return html_to_text(xhtml)[1]


def _principals_by_id(client: ConfluenceClient, space: str, pages: list[Any]) -> dict[str, _Principals]:
    """v1: page id -> read principals for every page read and every ancestor of one.

    From the pages themselves, then from the ancestors as the answers carried them, then (for ancestors the answers
    said nothing about, e.g. an incremental read whose server ignored the nested expansion) asked one by one.
    """
    known: dict[str, _Principals] = {}

    def learn(content: Any) -> None:
        content_id = _page_id(content)
        if content_id is None or content_id in known or "restrictions" not in content:
            return
        try:
            known[content_id] = _read_principals(content)
        except _Malformed as problem:
            known[content_id] = problem

    needed: list[str] = []
    for page in pages:
        learn(page)
    for page in pages:
        ancestors = page.get("ancestors") if isinstance(page, dict) else None
        for ancestor in ancestors if isinstance(ancestors, list) else ():
            learn(ancestor)
            ancestor_id = _page_id(ancestor)
            if ancestor_id is not None:
                needed.append(ancestor_id)
    for ancestor_id in dict.fromkeys(needed):
        if ancestor_id not in known:
            known[ancestor_id] = client.content_read_principals(ancestor_id, space)
    return known


def _v1_page(page: Any, principals: Mapping[str, _Principals]) -> _Page:
    """A v1 content object (``CONTENT_EXPAND`` expanded) as a ``_Page``; ``_Malformed`` names what is wrong."""
    page_id, title, body, number = _common_fields(page)
    when = _version_time(page, "when")
    if when is None:
        raise _Malformed(f"page {page_id}: version.when is missing or not an ISO 8601 time")
    block = _dig(page, "metadata", "labels")
    labels = [] if block is None else _label_names(block.get("results") if isinstance(block, dict) else None,
                                                   f"page {page_id}: metadata.labels.results")
    ancestors = page.get("ancestors", [])
    if not isinstance(ancestors, list) or not all(isinstance(a, dict) and _page_id(a) for a in ancestors):
        raise _Malformed(f"page {page_id}: ancestors is not a list of content objects with ids")
    chain = [(str(_page_id(a)), str(a.get("title", ""))) for a in ancestors]
    return _Page(page_id, title, body, number, when, _dig(page, "_links", "webui"), labels, chain,
                 _levels(page_id, [ancestor_id for ancestor_id, _ in chain], principals))


def _v2_page(
    page: Any,
    labels: Mapping[str, list[Any]],
    ancestors: Mapping[str, list[Any]],
    titles: Mapping[str, Any],
    principals: Mapping[str, _Principals],
) -> _Page:
    """A v2 page object (``body-format=storage``) with its labels, ancestors and restrictions as a ``_Page``."""
    page_id, title, body, number = _common_fields(page)
    when = _version_time(page, "createdAt")
    if when is None:
        raise _Malformed(f"page {page_id}: version.createdAt is missing or not an ISO 8601 time")
    chain = ancestors[page_id]
    if not all(isinstance(a, dict) and _page_id(a) for a in chain):
        raise _Malformed(f"page {page_id}: its ancestors are not content objects with ids")
    ancestor_ids = [str(_page_id(a)) for a in chain]
    named = [(ancestor_id, t if isinstance(t := titles.get(ancestor_id), str) else "") for ancestor_id in ancestor_ids]
    return _Page(page_id, title, body, number, when, _dig(page, "_links", "webui"),
                 _label_names(labels[page_id], f"page {page_id}: labels"), named,
                 _levels(page_id, ancestor_ids, principals))


def _common_fields(page: Any) -> tuple[str, str, str, int]:
    """id, title, storage body and version number, which both APIs put in the same places."""
    page_id = _page_id(page)
    if page_id is None:
        raise _Malformed("not a content object with an id")
    title = page.get("title")
    if not isinstance(title, str):
        raise _Malformed(f"page {page_id}: title is not a string")
    body = _dig(page, "body", "storage", "value")
    if not isinstance(body, str):
        raise _Malformed(f"page {page_id}: body.storage.value is missing or not a string")
    number = _version_number(page)
    if number is None:
        raise _Malformed(f"page {page_id}: version.number is missing or not an integer")
    return page_id, title, body, number


def _levels(page_id: str, ancestor_ids: list[str], principals: Mapping[str, _Principals]) -> list[frozenset[str]]:
    """The restricted levels a reader of the page must pass: its restricted ancestors' (root first), then its own."""
    levels: list[frozenset[str]] = []
    for ancestor_id in ancestor_ids:
        admitted = principals.get(ancestor_id)
        if isinstance(admitted, _Malformed):
            raise _Malformed(f"page {page_id}: the read restrictions of its ancestor {ancestor_id} cannot be read: "
                             f"{admitted}")
        if admitted:
            levels.append(admitted)
    if page_id not in principals:
        raise _Malformed(f"page {page_id}: the answer has no read restrictions; refusing to guess who may read it")
    own = principals[page_id]
    if isinstance(own, _Malformed):
        raise _Malformed(f"page {page_id}: {own}")
    if own:
        levels.append(own)
    return levels


def _page_document(source: ConfluenceSource, base_url: str, space: str, page: _Page) -> Document:
    if page.levels:
        common = frozenset.intersection(*page.levels)
        access_groups = sorted(common) if common else [NO_COMMON_PRINCIPAL]
    else:
        access_groups = sorted(set(source.access_groups))
    access_restrictions = [sorted(level) for level in page.levels]
    try:
        text = storage_to_text(page.body)
    except Exception as error:  # noqa: BLE001 (any parser failure is this page's problem, not the read's)
        raise _Malformed(f"page {page.id}: body cannot be parsed: {type(error).__name__}: {error}") from error
    webui = page.webui
    uri = f"{base_url}{webui}" if isinstance(webui, str) and webui.startswith("/") else (
        f"{base_url}/pages/viewpage.action?pageId={page.id}"
    )
    ancestor_titles = [title for _, title in page.ancestors]
    metadata = {
        "space_key": space,
        "page_id": page.id,
        "version": page.version,
        "last_modified": page.modified.isoformat(timespec="seconds"),
        "labels": page.labels,
        "ancestors": ancestor_titles,
        "ancestor_ids": [ancestor_id for ancestor_id, _ in page.ancestors],
        "access_groups": access_groups,
        "access_restrictions": access_restrictions,
    }
    digest = content_hash(
        page.title,
        text,
        uri,
        json.dumps(page.labels),
        json.dumps(ancestor_titles),
        json.dumps(access_groups),
        json.dumps(access_restrictions),
    )
    return Document(
        doc_id=f"{source.name}:{page.id}",
        source=source.name,
        uri=uri,
        title=page.title,
        text=text,
        content_hash=digest,
        metadata=metadata,
    )


def _restriction_principals(data: dict[str, Any]) -> frozenset[str] | None:
    """Who a v1 ``restriction/byOperation/read`` answer admits. Both principal blocks must be there: a block left
    out (not expanded) would otherwise read as "no restriction" and open the page to everyone."""
    blocks = data.get("restrictions")
    if not isinstance(blocks, dict) or not all(isinstance(blocks.get(kind), dict) for kind in ("user", "group")):
        raise _Malformed("the read restriction answer lacks restrictions.user or restrictions.group")
    return _read_principals({"restrictions": {"read": data}})


def _read_principals(content: dict[str, Any]) -> frozenset[str] | None:
    """Who a read restriction on ``content`` admits (groups by name, users as ``user:<id>``); None: no restriction.

    "No restriction" is only read from an answer that says so: the read restriction with both principal blocks, empty.
    A missing block (a server that did not expand it) says nothing about who may read the page, and must not open it
    to everyone."""
    restrictions = content.get("restrictions")
    read = restrictions.get("read") if isinstance(restrictions, dict) else None
    inner = read.get("restrictions") if isinstance(read, dict) else None
    if not isinstance(inner, dict) or not all(isinstance(inner.get(kind), dict) for kind in ("user", "group")):
        raise _Malformed("the read restriction lacks restrictions.read.restrictions.user or .group (not expanded?)")
    principals: set[str] = set()
    for kind in ("group", "user"):
        results = inner[kind].get("results")
        if not isinstance(results, list):
            raise _Malformed(f"restrictions.read.restrictions.{kind}.results is not a list")
        for entry in results:
            if not isinstance(entry, dict):
                raise _Malformed(f"a read restriction {kind} is not an object")
            if kind == "group":
                name = entry.get("name")
                if not isinstance(name, str) or not name.strip():
                    raise _Malformed("a read restriction group has no name")
                principals.add(name)
            else:
                ident = entry.get("accountId") or entry.get("username") or entry.get("userKey")
                if not isinstance(ident, str) or not ident:
                    raise _Malformed("a read restriction user has no accountId, username or userKey")
                principals.add(f"user:{ident}")
    return frozenset(principals) or None


def _label_names(results: Any, where: str) -> list[str]:
    if not isinstance(results, list):
        raise _Malformed(f"{where} is not a list")
    names = {entry.get("name") for entry in results if isinstance(entry, dict)}
    return sorted(name for name in names if isinstance(name, str) and name)


def _page_id(page: Any) -> str | None:
    if not isinstance(page, dict):
        return None
    value = page.get("id")
    if isinstance(value, bool) or not isinstance(value, (str, int)) or str(value).strip() == "":
        return None
    return str(value)


def _version_number(page: Any) -> int | None:
    number = _dig(page, "version", "number")
    return number if isinstance(number, int) and not isinstance(number, bool) else None


def _version_time(page: Any, field: str) -> dt.datetime | None:
    """``version.<field>`` as an aware UTC time (v1 calls it ``when``, v2 ``createdAt``)."""
    value = _dig(page, "version", field)
    if not isinstance(value, str):
        return None
    try:
        return _as_utc(dt.datetime.fromisoformat(value.replace("Z", "+00:00")))
    except ValueError:
        return None


def _dig(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _as_utc(moment: dt.datetime) -> dt.datetime:
    if moment.tzinfo is None:
        return moment.replace(tzinfo=dt.timezone.utc)
    return moment.astimezone(dt.timezone.utc)


def _cql_escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')
