"""A real HTTP server on 127.0.0.1 speaking the Confluence REST API subset ``lib.confluence`` uses.

Pages live in memory and are added, edited (version bumped), re-labelled or re-restricted (version kept, as in
Confluence) and deleted by the test. Routes, under the server's context path (``/wiki`` as on Cloud by default):

* ``GET /rest/api/content?spaceKey&type=page&status&limit&start&expand``: the space's pages, ``limit`` capped at
  ``max_limit`` (small, so every test paginates), ``_links.next`` relative to the base URL;
* ``GET /rest/api/content/search?cql&limit&start&expand``: only ``space="KEY" and type=page and lastmodified >=
  "yyyy/MM/dd HH:mm"`` (UTC) is understood, anything else is a 400; its ``next`` link carries an opaque cursor, as
  Cloud's does;
* ``GET /rest/api/content/ID?expand``: one page;
* ``GET /rest/api/space/KEY``: the space, or 404.

Expansions are honoured: ``body.storage``, ``version``, ``ancestors`` (with ``ancestors.restrictions...``),
``metadata.labels`` and ``restrictions.read.restrictions.user|group``; a body is only sent when asked for. Every
request must carry ``Basic base64(user:token)`` or ``Bearer token`` (401 otherwise). ``fail_next`` scripts error
answers (429 with ``Retry-After`` by default) for the next requests. Every request is logged with its parameters, the
authorization scheme, the status answered and the ids of the pages returned.

``confluence_server`` is the pytest fixture: a started Cloud-style server, stopped after the test.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import re
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit

import pytest

_CQL = re.compile(
    r'^\s*space\s*=\s*"(?P<space>(?:[^"\\]|\\.)*)"\s+and\s+type\s*=\s*page\s+and\s+lastmodified\s*>=\s*'
    r'"(?P<when>\d{4}/\d{2}/\d{2} \d{2}:\d{2})"\s*$',
    re.IGNORECASE,
)
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


@dataclass
class FakePage:
    id: str
    space: str
    title: str
    body: Any
    parent: str | None = None
    labels: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    users: list[str] = field(default_factory=list)
    version: int = 1
    when: dt.datetime = T0
    override: dict[str, Any] = field(default_factory=dict)  # merged over the rendered JSON: malformed pages


@dataclass(frozen=True)
class LoggedRequest:
    path: str  # without the context path, e.g. /rest/api/content
    params: dict[str, str]
    auth_scheme: str  # "basic", "bearer" or "" (none)
    status: int
    result_ids: tuple[str, ...] = ()

    @property
    def expand(self) -> set[str]:
        return {item for item in self.params.get("expand", "").split(",") if item}


class ConfluenceServer:
    def __init__(
        self,
        *,
        context: str = "/wiki",
        flavor: str = "cloud",
        user: str = "bot@example.com",
        token: str = "s3cret-token",
        max_limit: int = 3,
    ) -> None:
        self.context = context.rstrip("/")
        self.flavor = flavor
        self.user = user
        self.token = token
        self.max_limit = max_limit
        self.omit_next_links = False  # clients must then page by start/limit/size
        self.expand_ancestor_restrictions = True  # False: like a server ignoring the nested expansion
        self.spaces: dict[str, str] = {}  # key -> name
        self.pages: dict[str, FakePage] = {}
        self.requests: list[LoggedRequest] = []
        self._failures: deque[tuple[int, dict[str, str]]] = deque()
        self._next_id = 1000
        self._clock = T0
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="confluence-fixture", daemon=True
        )

    # ------------------------------------------------------------------------------------------------------ control

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}{self.context}"

    def start(self) -> "ConfluenceServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> "ConfluenceServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def add_space(self, key: str, name: str | None = None) -> None:
        with self._lock:
            self.spaces.setdefault(key, name or f"Space {key}")

    def add_page(
        self,
        space: str,
        title: str,
        body: Any = None,
        *,
        parent: str | None = None,
        labels: tuple[str, ...] = (),
        groups: tuple[str, ...] = (),
        users: tuple[str, ...] = (),
        when: dt.datetime | None = None,
    ) -> str:
        self.add_space(space)
        with self._lock:
            self._next_id += 1
            page_id = str(self._next_id)
            if parent is not None and parent not in self.pages:
                raise KeyError(f"no parent page {parent}")
            self.pages[page_id] = FakePage(
                id=page_id,
                space=space,
                title=title,
                body=body if body is not None else f"<p>{title} body.</p>",
                parent=parent,
                labels=list(labels),
                groups=list(groups),
                users=list(users),
                when=when or self._tick(),
            )
            return page_id

    def edit_page(
        self, page_id: str, *, title: str | None = None, body: Any = None, when: dt.datetime | None = None
    ) -> None:
        """A new version, as a save in the editor makes."""
        with self._lock:
            page = self.pages[page_id]
            if title is not None:
                page.title = title
            if body is not None:
                page.body = body
            page.version += 1
            page.when = when or self._tick()

    def set_restrictions(self, page_id: str, *, groups: tuple[str, ...] = (), users: tuple[str, ...] = ()) -> None:
        """Change who may read the page; like Confluence, this makes no new version."""
        with self._lock:
            self.pages[page_id].groups = list(groups)
            self.pages[page_id].users = list(users)

    def set_labels(self, page_id: str, labels: tuple[str, ...]) -> None:
        with self._lock:
            self.pages[page_id].labels = list(labels)

    def corrupt(self, page_id: str, **override: Any) -> None:
        """Fields of the page's JSON replaced as given (deep-merged), e.g. ``body={"storage": {"value": 42}}``."""
        with self._lock:
            self.pages[page_id].override = override

    def delete_page(self, page_id: str) -> None:
        with self._lock:
            del self.pages[page_id]

    def fail_next(self, status: int = 429, *, times: int = 1, retry_after: str | None = "0") -> None:
        headers = {"Retry-After": retry_after} if retry_after is not None else {}
        with self._lock:
            self._failures.extend((status, headers) for _ in range(times))

    def clear_log(self) -> None:
        with self._lock:
            self.requests.clear()

    def _tick(self) -> dt.datetime:
        self._clock += dt.timedelta(minutes=1)
        return self._clock

    # ------------------------------------------------------------------------------------------------------ serving

    def handle(self, raw_path: str, authorization: str | None) -> tuple[int, dict[str, str], Any]:
        parts = urlsplit(raw_path)
        params = {key: values[0] for key, values in parse_qs(parts.query, keep_blank_values=True).items()}
        path = parts.path
        scheme = (authorization or "").split(" ", 1)[0].lower()
        with self._lock:
            status, headers, payload, ids = self._answer(path, params, authorization)
            logged_path = path[len(self.context):] if path.startswith(self.context) else path
            self.requests.append(LoggedRequest(logged_path, params, scheme, status, tuple(ids)))
        return status, headers, payload

    def _answer(
        self, path: str, params: dict[str, str], authorization: str | None
    ) -> tuple[int, dict[str, str], Any, list[str]]:
        if self._failures:
            status, headers = self._failures.popleft()
            return status, headers, {"statusCode": status, "message": "scripted failure"}, []
        if not self._authorized(authorization):
            return 401, {}, {"statusCode": 401, "message": "This request requires authentication."}, []
        if not path.startswith(f"{self.context}/rest/api/"):
            return 404, {}, {"statusCode": 404, "message": f"no route {path}"}, []
        route = path[len(self.context):]
        expand = {item for item in params.get("expand", "").split(",") if item}
        if route == "/rest/api/content":
            space = params.get("spaceKey", "")
            if params.get("type", "page") != "page":
                return 400, {}, {"statusCode": 400, "message": "only pages here"}, []
            pages = [page for page in self.pages.values() if page.space == space]
            return self._paged(route, params, pages, expand)
        if route == "/rest/api/content/search":
            match = _CQL.match(params.get("cql", ""))
            if match is None:
                return 400, {}, {"statusCode": 400, "message": f"cannot parse CQL {params.get('cql')!r}"}, []
            space = re.sub(r"\\(.)", r"\1", match.group("space"))
            since = dt.datetime.strptime(match.group("when"), "%Y/%m/%d %H:%M").replace(tzinfo=dt.timezone.utc)
            pages = [page for page in self.pages.values() if page.space == space and page.when >= since]
            if "cursor" in params:
                params = {**params, "start": base64.urlsafe_b64decode(params["cursor"]).decode()}
            return self._paged(route, params, pages, expand)
        if match := re.fullmatch(r"/rest/api/content/(\d+)", route):
            page = self.pages.get(match.group(1))
            if page is None:
                return 404, {}, {"statusCode": 404, "message": "No content found"}, []
            return 200, {}, self._render(page, expand), [page.id]
        if match := re.fullmatch(r"/rest/api/space/([^/]+)", route):
            key = match.group(1)
            if key not in self.spaces:
                return 404, {}, {"statusCode": 404, "message": f"No space with key : {key}"}, []
            return 200, {}, {"key": key, "name": self.spaces[key], "type": "global"}, []
        return 404, {}, {"statusCode": 404, "message": f"no route {route}"}, []

    def _authorized(self, authorization: str | None) -> bool:
        if not authorization:
            return False
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() == "bearer":
            return value == self.token
        if scheme.lower() == "basic":
            try:
                decoded = base64.b64decode(value, validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                return False
            return decoded == f"{self.user}:{self.token}"
        return False

    def _paged(
        self, route: str, params: dict[str, str], pages: list[FakePage], expand: set[str]
    ) -> tuple[int, dict[str, str], Any, list[str]]:
        start = int(params.get("start") or 0)
        limit = min(int(params.get("limit") or 25), self.max_limit)
        window = pages[start : start + limit]
        links: dict[str, str] = {"base": self.base_url, "context": self.context, "self": f"{self.base_url}{route}"}
        if start + limit < len(pages) and not self.omit_next_links:
            query = {key: value for key, value in params.items() if key not in {"start", "cursor", "next"}}
            if route.endswith("/search"):  # Cloud's CQL search pages with an opaque cursor
                cursor = base64.urlsafe_b64encode(str(start + limit).encode()).decode()
                query.update({"next": "true", "cursor": cursor, "limit": str(limit)})
            else:
                query.update({"limit": str(limit), "start": str(start + limit)})
            links["next"] = f"{route}?{urlencode(query)}"
        payload = {
            "results": [self._render(page, expand) for page in window],
            "start": start,
            "limit": limit,
            "size": len(window),
            "_links": links,
        }
        return 200, {}, payload, [page.id for page in window]

    def _render(self, page: FakePage, expand: set[str]) -> dict[str, Any]:
        if self.flavor == "cloud":
            webui = f"/spaces/{page.space}/pages/{page.id}/{quote(page.title.replace(' ', '+'))}"
        else:
            webui = f"/pages/viewpage.action?pageId={page.id}"
        data: dict[str, Any] = {
            "id": page.id,
            "type": "page",
            "status": "current",
            "title": page.title,
            "_links": {"webui": webui, "self": f"{self.base_url}/rest/api/content/{page.id}"},
            "_expandable": {"space": f"/rest/api/space/{page.space}"},
        }
        if "body.storage" in expand:
            data["body"] = {"storage": {"value": page.body, "representation": "storage"}}
        if "version" in expand:
            data["version"] = {
                "number": page.version,
                "when": page.when.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
                "minorEdit": False,
                "by": {"type": "known", "displayName": "Editor"},
            }
        if "metadata.labels" in expand:
            results = [
                {"prefix": "global", "name": name, "id": str(i), "label": name} for i, name in enumerate(page.labels)
            ]
            data["metadata"] = {"labels": {"results": results, "start": 0, "limit": 200, "size": len(results)}}
        restrictions = self._restrictions(page, expand, "restrictions.read.restrictions.")
        if restrictions is not None:
            data["restrictions"] = restrictions
        if "ancestors" in expand or any(item.startswith("ancestors.") for item in expand):
            ancestors = []
            for ancestor in self._ancestors(page):
                item: dict[str, Any] = {
                    "id": ancestor.id,
                    "type": "page",
                    "status": "current",
                    "title": ancestor.title,
                    "_links": {"webui": f"/pages/viewpage.action?pageId={ancestor.id}"},
                }
                if self.expand_ancestor_restrictions:
                    nested = self._restrictions(ancestor, expand, "ancestors.restrictions.read.restrictions.")
                    if nested is not None:
                        item["restrictions"] = nested
                ancestors.append(item)
            data["ancestors"] = ancestors
        return _deep_merge(data, page.override)

    def _restrictions(self, page: FakePage, expand: set[str], prefix: str) -> dict[str, Any] | None:
        kinds = [kind for kind in ("user", "group") if f"{prefix}{kind}" in expand]
        if not kinds:
            return None
        blocks: dict[str, Any] = {}
        if "user" in kinds:
            users = [
                {"type": "known", "accountId": user, "displayName": user}
                if self.flavor == "cloud"
                else {"type": "known", "username": user, "userKey": f"key-{user}", "displayName": user}
                for user in page.users
            ]
            blocks["user"] = {"results": users, "start": 0, "limit": 200, "size": len(users)}
        if "group" in kinds:
            groups = [{"type": "group", "name": name} for name in page.groups]
            blocks["group"] = {"results": groups, "start": 0, "limit": 200, "size": len(groups)}
        return {"read": {"operation": "read", "restrictions": blocks}}

    def _ancestors(self, page: FakePage) -> list[FakePage]:
        chain: list[FakePage] = []
        parent = page.parent
        while parent is not None and parent in self.pages:
            chain.append(self.pages[parent])
            parent = self.pages[parent].parent
        return list(reversed(chain))  # root first, as Confluence answers


def _deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _handler_for(server: ConfluenceServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            status, headers, payload = server.handle(self.path, self.headers.get("Authorization"))
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def confluence_server() -> Iterator[ConfluenceServer]:
    with ConfluenceServer() as server:
        yield server
