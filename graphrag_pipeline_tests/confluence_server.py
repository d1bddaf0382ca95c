"""A real HTTP server on 127.0.0.1 speaking the Confluence REST API subset ``lib.sources.confluence`` uses.

Pages live in memory and are added, edited (version bumped), re-labelled or re-restricted (version kept, as in
Confluence) and deleted by the test. ``flavor="cloud"`` (the default, context path ``/wiki``) speaks the v2 API and
the v1 endpoints Cloud still has; ``flavor="datacenter"`` speaks v1 only. Routes, under the context path:

v2, Cloud only (Data Center has none: 404):

* ``GET /api/v2/spaces?keys=A,B``: the spaces with those keys (``id``, ``key``, ``name``, ...);
* ``GET /api/v2/spaces/{id}/pages?status&body-format=storage&limit&cursor``: the space's pages;
* ``GET /api/v2/pages?id=1,2&status&body-format&limit&cursor``: the pages with those ids;
* ``GET /api/v2/pages/{id}`` and ``GET /api/v2/folders/{id}``: one page or folder;
* ``GET /api/v2/pages/{id}/labels?limit&cursor``: its labels (``id``, ``name``, ``prefix``);
* ``GET /api/v2/{pages|folders}/{id}/ancestors?limit``: its nearest ``limit`` ancestors (``id``, ``type``), root
  first, without a cursor (the client asks again from the highest one, as the real endpoint documents).

A v2 page carries ``id``, ``status``, ``title``, ``spaceId``, ``parentId``, ``parentType``, ``version.number``,
``version.createdAt``, ``_links.webui`` and, only when ``body-format=storage`` is asked for, ``body.storage.value``.
Listings cap ``limit`` at ``max_limit`` (small, so every test paginates) and answer
``{"results": [...], "_links": {"next": "<context>/api/v2/...?cursor=...", "base": ...}}`` plus the same next URL in
a ``Link: <...>; rel="next"`` header; with ``omit_next_links`` only the header carries it.

v1:

* ``GET /rest/api/content/search?cql&limit&start&expand``: only ``space="KEY" and type=page and lastmodified >=
  "yyyy/MM/dd HH:mm"`` (UTC) is understood, anything else is a 400; its ``next`` link carries an opaque cursor, as
  Cloud's does;
* ``GET /rest/api/content/{id}/restriction/byOperation/read?expand=restrictions.user,restrictions.group``;
* content endpoints: ``GET /rest/api/content?spaceKey&type=page&status&limit&start&expand`` (the space's pages,
  ``limit`` capped at ``max_limit``, ``_links.next`` relative to the base URL), ``GET /rest/api/content/{id}?expand``
  and ``GET /rest/api/space/{key}`` (or 404). Atlassian removed these from Cloud, so a Cloud server answers them
  with 410 Gone unless ``v1_content_endpoints`` is set (a Cloud site from before the removal).

v1 expansions are honoured: ``body.storage``, ``version``, ``ancestors`` (with ``ancestors.restrictions...``),
``metadata.labels`` and ``restrictions.read.restrictions.user|group``; a body is only sent when asked for. Folders
(Cloud only, ``add_folder``) hold pages but are not pages: no listing or search returns them, ancestors do. Every
request must carry ``Basic base64(user:token)`` or ``Bearer token`` (401 otherwise). ``fail_next`` scripts error
answers (429 with ``Retry-After`` by default) for the next requests. Every request is logged with its parameters, the
API version that served it, the authorization scheme, the status answered and the ids of the pages returned.

``confluence_server`` is the pytest fixture: a started Cloud server, stopped after the test.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import re
import threading
from collections import deque
from collections.abc import Callable, Iterator
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
V2_MAX_LIMIT = 250  # the real v2 API's largest page size; ancestors honour the limit asked for up to this


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
    restriction_override: dict[str, Any] = field(default_factory=dict)  # merged over its byOperation/read answer
    kind: str = "page"  # or "folder"


@dataclass(frozen=True)
class LoggedRequest:
    path: str  # without the context path, e.g. /rest/api/content or /api/v2/spaces/2001/pages
    params: dict[str, str]
    auth_scheme: str  # "basic", "bearer" or "" (none)
    status: int
    result_ids: tuple[str, ...] = ()
    api: str = ""  # "v1" (/rest/api/...), "v2" (/api/v2/...) or "" (any other path)

    @property
    def expand(self) -> set[str]:
        """The v1 expansions asked for. A v2 request for storage-format bodies (``body-format=storage``) shows as
        ``body.storage`` too, so ``"body.storage" in request.expand`` finds every body fetch on either API."""
        items = {item for item in self.params.get("expand", "").split(",") if item}
        if self.params.get("body-format") == "storage":
            items.add("body.storage")
        return items


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
        if flavor not in ("cloud", "datacenter"):
            raise ValueError(f"flavor must be 'cloud' or 'datacenter', not {flavor!r}")
        self.context = context.rstrip("/")
        self.flavor = flavor
        self.user = user
        self.token = token
        self.max_limit = max_limit
        self.omit_next_links = False  # v1 clients must then page by start/limit/size, v2 clients by the Link header
        self.expand_ancestor_restrictions = True  # False: like a server ignoring the nested expansion
        self.v1_content_endpoints = flavor != "cloud"  # Cloud answers them 410 Gone
        self.spaces: dict[str, str] = {}  # key -> name
        self.space_ids: dict[str, str] = {}  # key -> v2 space id
        self.pages: dict[str, FakePage] = {}  # pages and folders by id
        self.requests: list[LoggedRequest] = []
        self._failures: deque[tuple[int, dict[str, str]]] = deque()
        self._deleted_after_listing: list[str] = []
        self._missing_paths: list[re.Pattern[str]] = []
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
            if key not in self.spaces:
                self.spaces[key] = name or f"Space {key}"
                self.space_ids[key] = str(2000 + len(self.space_ids) + 1)

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
        """A new page (``parent``: a page or folder id); returns its id."""
        return self._add(FakePage(
            id="", space=space, title=title, body=body if body is not None else f"<p>{title} body.</p>",
            parent=parent, labels=list(labels), groups=list(groups), users=list(users), when=when or T0,
        ), stamped=when is None)

    def add_folder(
        self,
        space: str,
        title: str,
        *,
        parent: str | None = None,
        groups: tuple[str, ...] = (),
        users: tuple[str, ...] = (),
    ) -> str:
        """A new Cloud folder (it holds pages and may restrict them, has no body); returns its id."""
        if self.flavor != "cloud":
            raise ValueError("folders exist on Confluence Cloud only")
        return self._add(FakePage(id="", space=space, title=title, body=None, parent=parent, groups=list(groups),
                                  users=list(users), kind="folder"), stamped=True)

    def _add(self, item: FakePage, *, stamped: bool) -> str:
        self.add_space(item.space)
        with self._lock:
            if item.parent is not None and item.parent not in self.pages:
                raise KeyError(f"no parent page {item.parent}")
            self._next_id += 1
            item.id = str(self._next_id)
            if stamped:
                item.when = self._tick()
            self.pages[item.id] = item
            return item.id

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
        """Fields of the page's JSON replaced as given (deep-merged), e.g. ``body={"storage": {"value": 42}}``; the
        override applies to whichever API's JSON is served (v1 ``version.when``, v2 ``version.createdAt``)."""
        with self._lock:
            self.pages[page_id].override = override

    def corrupt_restriction(self, page_id: str, **override: Any) -> None:
        """Fields of the page's ``restriction/byOperation/read`` answer replaced as given (deep-merged)."""
        with self._lock:
            self.pages[page_id].restriction_override = override

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

    def delete_after_next_listing(self, *page_ids: str) -> None:
        """Delete pages right after the next v2 page listing is answered: a page deleted while a client reads the
        space, listed but gone by the time its labels, ancestors or restrictions are asked for."""
        with self._lock:
            self._deleted_after_listing.extend(page_ids)

    def answer_404(self, path_pattern: str) -> None:
        """Requests whose path (without the context) matches the pattern answer 404 from now on."""
        with self._lock:
            self._missing_paths.append(re.compile(path_pattern))

    def handle(self, raw_path: str, authorization: str | None) -> tuple[int, dict[str, str], Any]:
        parts = urlsplit(raw_path)
        params = {key: values[0] for key, values in parse_qs(parts.query, keep_blank_values=True).items()}
        path = parts.path
        scheme = (authorization or "").split(" ", 1)[0].lower()
        with self._lock:
            status, headers, payload, ids = self._answer(path, params, authorization)
            logged_path = path[len(self.context):] if path.startswith(self.context) else path
            api = "v1" if logged_path.startswith("/rest/api/") else "v2" if logged_path.startswith("/api/v2/") else ""
            self.requests.append(LoggedRequest(logged_path, params, scheme, status, tuple(ids), api))
            if self._deleted_after_listing and re.fullmatch(r"/api/v2/spaces/[^/]+/pages", logged_path):
                for page_id in self._deleted_after_listing:
                    self.pages.pop(page_id, None)
                self._deleted_after_listing.clear()
        return status, headers, payload

    def _answer(
        self, path: str, params: dict[str, str], authorization: str | None
    ) -> tuple[int, dict[str, str], Any, list[str]]:
        if self._failures:
            status, headers = self._failures.popleft()
            return status, headers, {"statusCode": status, "message": "scripted failure"}, []
        route = path[len(self.context):]
        if any(pattern.fullmatch(route) for pattern in self._missing_paths):
            return _error(404, f"no content at {route}")
        if not self._authorized(authorization):
            return 401, {}, {"statusCode": 401, "message": "This request requires authentication."}, []
        route = path[len(self.context):] if path.startswith(f"{self.context}/") else ""
        if route.startswith("/api/v2/") and self.flavor == "cloud":
            return self._answer_v2(route, params)
        if route.startswith("/rest/api/"):
            return self._answer_v1(route, params)
        return _error(404, f"no route {path}")

    def _answer_v1(self, route: str, params: dict[str, str]) -> tuple[int, dict[str, str], Any, list[str]]:
        expand = {item for item in params.get("expand", "").split(",") if item}
        if route == "/rest/api/content/search":
            match = _CQL.match(params.get("cql", ""))
            if match is None:
                return _error(400, f"cannot parse CQL {params.get('cql')!r}")
            space = re.sub(r"\\(.)", r"\1", match.group("space"))
            since = dt.datetime.strptime(match.group("when"), "%Y/%m/%d %H:%M").replace(tzinfo=dt.timezone.utc)
            pages = [page for page in self._pages_of(space) if page.when >= since]
            if "cursor" in params:
                params = {**params, "start": base64.urlsafe_b64decode(params["cursor"]).decode()}
            return self._paged(route, params, pages, expand)
        if match := re.fullmatch(r"/rest/api/content/(\d+)/restriction/byOperation/read", route):
            item = self.pages.get(match.group(1))
            if item is None:
                return _error(404, "No content found")
            return 200, {}, self._render_read_restriction(item, expand), [item.id]
        if not self.v1_content_endpoints:
            return _error(410, f"GET {route} has been removed from Confluence Cloud; use the v2 API (/api/v2)")
        if route == "/rest/api/content":
            if params.get("type", "page") != "page":
                return _error(400, "only pages here")
            return self._paged(route, params, self._pages_of(params.get("spaceKey", "")), expand)
        if match := re.fullmatch(r"/rest/api/content/(\d+)", route):
            page = self.pages.get(match.group(1))
            if page is None:
                return _error(404, "No content found")
            return 200, {}, self._render(page, expand), [page.id]
        if match := re.fullmatch(r"/rest/api/space/([^/]+)", route):
            key = match.group(1)
            if key not in self.spaces:
                return _error(404, f"No space with key : {key}")
            return 200, {}, {"key": key, "name": self.spaces[key], "type": "global"}, []
        return _error(404, f"no route {route}")

    def _answer_v2(self, route: str, params: dict[str, str]) -> tuple[int, dict[str, str], Any, list[str]]:
        if params.get("body-format", "storage") != "storage":
            return _error(400, f"body-format {params['body-format']!r} is not served by this fixture")
        bodies = params.get("body-format") == "storage"
        if route == "/api/v2/spaces":
            keys = {key for key in params.get("keys", "").split(",") if key}
            spaces = [key for key in self.spaces if not keys or key in keys]
            return self._v2_paged(route, params, spaces, self._render_space)
        if match := re.fullmatch(r"/api/v2/spaces/(\d+)/pages", route):
            keys = [key for key, space_id in self.space_ids.items() if space_id == match.group(1)]
            if not keys:
                return _error(404, "Space not found")
            return self._v2_paged(route, params, self._pages_of(keys[0]), lambda page: self._render_v2(page, bodies))
        if route == "/api/v2/pages":
            wanted = {page_id for page_id in params.get("id", "").split(",") if page_id}
            pages = [page for page in self.pages.values() if page.kind == "page" and (not wanted or page.id in wanted)]
            return self._v2_paged(route, params, pages, lambda page: self._render_v2(page, bodies))
        match = re.fullmatch(r"/api/v2/(pages|folders)/(\d+)(/labels|/ancestors)?", route)
        item = self.pages.get(match.group(2)) if match else None
        if match is None or item is None or f"{item.kind}s" != match.group(1):
            return _error(404, f"no content at {route}")
        if match.group(3) is None:
            return 200, {}, self._render_v2(item, bodies), [item.id]
        if match.group(3) == "/labels" and item.kind == "page":
            return self._v2_paged(route, params, list(enumerate(item.labels)), lambda label: {
                "id": str(9000 + label[0]), "name": label[1], "prefix": "global"})
        if match.group(3) == "/ancestors":
            limit = min(int(params.get("limit") or 25), V2_MAX_LIMIT)
            nearest = self._ancestors(item)[-limit:]
            results = [{"id": ancestor.id, "type": ancestor.kind} for ancestor in nearest]
            return 200, {}, {"results": results, "_links": {"base": self.base_url}}, [a.id for a in nearest]
        return _error(404, f"no route {route}")

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

    def _pages_of(self, space: str) -> list[FakePage]:
        return [page for page in self.pages.values() if page.space == space and page.kind == "page"]

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

    def _v2_paged(
        self, route: str, params: dict[str, str], items: list[Any], render: Callable[[Any], dict[str, Any]]
    ) -> tuple[int, dict[str, str], Any, list[str]]:
        """One cursor page of ``items``; the cursor is opaque to clients (here: the offset, base64-encoded)."""
        try:
            start = int(base64.urlsafe_b64decode(params["cursor"]).decode()) if "cursor" in params else 0
        except (ValueError, binascii.Error):
            return _error(400, "invalid cursor")
        limit = min(int(params.get("limit") or 25), self.max_limit, V2_MAX_LIMIT)
        window = items[start : start + limit]
        links = {"base": self.base_url}
        headers: dict[str, str] = {}
        if start + limit < len(items):
            query = {key: value for key, value in params.items() if key != "cursor"}
            query["cursor"] = base64.urlsafe_b64encode(str(start + limit).encode()).decode()
            next_url = f"{self.context}{route}?{urlencode(query)}"
            headers["Link"] = f'<{next_url}>; rel="next", <{self.base_url}>; rel="base"'
            if not self.omit_next_links:
                links["next"] = next_url
        payload = {"results": [render(item) for item in window], "_links": links}
        return 200, headers, payload, [item.id for item in window if isinstance(item, FakePage)]

    def _webui(self, page: FakePage) -> str:
        if self.flavor == "cloud":
            return f"/spaces/{page.space}/pages/{page.id}/{quote(page.title.replace(' ', '+'))}"
        return f"/pages/viewpage.action?pageId={page.id}"

    def _render(self, page: FakePage, expand: set[str]) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": page.id,
            "type": page.kind,
            "status": "current",
            "title": page.title,
            "_links": {"webui": self._webui(page), "self": f"{self.base_url}/rest/api/content/{page.id}"},
            "_expandable": {"space": f"/rest/api/space/{page.space}"},
        }
        if "body.storage" in expand:
            data["body"] = {"storage": {"value": page.body, "representation": "storage"}}
        if "version" in expand:
            data["version"] = {
                "number": page.version,
                "when": _timestamp(page.when),
                "minorEdit": False,
                "by": {"type": "known", "displayName": "Editor"},
            }
        if "metadata.labels" in expand:
            results = [
                {"prefix": "global", "name": name, "id": str(i), "label": name} for i, name in enumerate(page.labels)
            ]
            data["metadata"] = {"labels": {"results": results, "start": 0, "limit": 200, "size": len(results)}}
        kinds = [kind for kind in ("user", "group") if f"restrictions.read.restrictions.{kind}" in expand]
        if kinds:
            data["restrictions"] = {"read": {"operation": "read", "restrictions": self._principals(page, kinds)}}
        if "ancestors" in expand or any(item.startswith("ancestors.") for item in expand):
            nested = [kind for kind in ("user", "group")
                      if f"ancestors.restrictions.read.restrictions.{kind}" in expand]
            ancestors = []
            for ancestor in self._ancestors(page):
                item: dict[str, Any] = {
                    "id": ancestor.id,
                    "type": ancestor.kind,
                    "status": "current",
                    "title": ancestor.title,
                    "_links": {"webui": f"/pages/viewpage.action?pageId={ancestor.id}"},
                }
                if self.expand_ancestor_restrictions and nested:
                    item["restrictions"] = {
                        "read": {"operation": "read", "restrictions": self._principals(ancestor, nested)}
                    }
                ancestors.append(item)
            data["ancestors"] = ancestors
        return _deep_merge(data, page.override)

    def _render_v2(self, item: FakePage, bodies: bool) -> dict[str, Any]:
        parent = self.pages.get(item.parent) if item.parent is not None else None
        data: dict[str, Any] = {
            "id": item.id,
            "status": "current",
            "title": item.title,
            "spaceId": self.space_ids[item.space],
            "parentId": parent.id if parent else None,
            "parentType": parent.kind if parent else None,
            "authorId": "557058:editor",
            "ownerId": "557058:editor",
            "createdAt": _timestamp(T0),
            "version": {
                "number": item.version,
                "createdAt": _timestamp(item.when),
                "message": "",
                "minorEdit": False,
                "authorId": "557058:editor",
            },
        }
        if item.kind == "folder":
            data["type"] = "folder"
            return data
        data["body"] = {"storage": {"representation": "storage", "value": item.body}} if bodies else {}
        data["_links"] = {
            "webui": self._webui(item),
            "editui": f"/pages/resumedraft.action?draftId={item.id}",
            "tinyui": f"/x/{item.id}",
        }
        return _deep_merge(data, item.override)

    def _render_space(self, key: str) -> dict[str, Any]:
        return {
            "id": self.space_ids[key],
            "key": key,
            "name": self.spaces[key],
            "type": "global",
            "status": "current",
            "_links": {"webui": f"/spaces/{key}"},
        }

    def _render_read_restriction(self, item: FakePage, expand: set[str]) -> dict[str, Any]:
        kinds = [kind for kind in ("user", "group") if f"restrictions.{kind}" in expand]
        data = {
            "operation": "read",
            "restrictions": self._principals(item, kinds),
            "_expandable": {f"restrictions.{kind}": "" for kind in ("user", "group") if kind not in kinds},
            "_links": {"base": self.base_url, "context": self.context},
        }
        return _deep_merge(data, item.restriction_override)

    def _principals(self, page: FakePage, kinds: list[str]) -> dict[str, Any]:
        """The ``user`` and ``group`` blocks of a read restriction (as both v1 forms nest them)."""
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
        return blocks

    def _ancestors(self, page: FakePage) -> list[FakePage]:
        chain: list[FakePage] = []
        parent = page.parent
        while parent is not None and parent in self.pages:
            chain.append(self.pages[parent])
            parent = self.pages[parent].parent
        return list(reversed(chain))  # root first, as Confluence answers


def _error(status: int, message: str) -> tuple[int, dict[str, str], Any, list[str]]:
    return status, {}, {"statusCode": status, "message": message}, []


def _timestamp(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.000Z")


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
        disable_nagle_algorithm = True  # headers and body go out in two writes: without this each answer waits ~40 ms

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
