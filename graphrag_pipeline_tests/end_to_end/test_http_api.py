"""The HTTP API as a caller on another host meets it: `graphrag-pipeline serve` started as its own process on
127.0.0.1, driven with httpx. Its answers are the query module's; a key decides the caller's groups, and a key without
the group sees nothing a restricted document alone supplies through any endpoint; bad input is a 4xx JSON error.

The corpus is the access-control one (`test_access_control`): a restricted incident about entities of its own and a
restricted page that names public services, states a relationship only it knows and words a public one its way.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
import uvicorn
import yaml

from graphrag_pipeline.lib.core.config import load_settings
from graphrag_pipeline.query import open_index
from graphrag_pipeline.server.app import create_app
from graphrag_pipeline.server.auth import KeyRing, key_digest
from graphrag_pipeline_tests.cli_process import CLI, cli_env
from graphrag_pipeline_tests.conftest import build
from graphrag_pipeline_tests.end_to_end.test_access_control import (
    GROUPS,
    LAUNCH_QUESTION,
    QUESTION,
    leaked,
    write_access_config,
)

pytestmark = [pytest.mark.slow, pytest.mark.server]

PUBLIC_KEY, ONCALL_KEY = "public-bot-key-1", "oncall-bot-key-2"
QUESTIONS = (QUESTION, LAUNCH_QUESTION, "What does checkout-service call?")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """An index of the access corpus and `graphrag-pipeline serve` answering over it on a free port: the public key
    from the configuration file, the on-call key from $GRAPHRAG_API_KEYS (both paths a deployment uses)."""
    root = tmp_path_factory.mktemp("http")
    corpus, config = write_access_config(
        root, server={"port": 0, "api_keys": [{"name": "public-bot", "sha256": key_digest(PUBLIC_KEY)}]})
    settings = load_settings(config)
    build(settings)
    env = cli_env(config)
    env["GRAPHRAG_API_KEYS"] = json.dumps([{"name": "oncall-bot", "sha256": key_digest(ONCALL_KEY),
                                            "groups": GROUPS}])
    process = subprocess.Popen([*CLI, "serve"], cwd=root, env=env, stderr=subprocess.PIPE, text=True)
    log: list[str] = []
    url = None
    for line in process.stderr:  # uvicorn names the port it bound once it listens
        log.append(line)
        if match := re.search(r"Uvicorn running on (http://127\.0\.0\.1:\d+)", line):
            url = match.group(1)
            break
    assert url, "".join(log)
    threading.Thread(target=lambda: log.extend(process.stderr), daemon=True).start()
    try:
        yield settings, url, corpus, log
    finally:
        process.terminate()
        process.wait(timeout=30)


def client(url: str, key: str | None) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"} if key else {}, timeout=60)


def test_search_answers_what_the_query_module_answers_for_the_keys_groups(served):
    settings, url, _, _ = served
    with open_index(settings=settings) as index:
        for key, groups in ((PUBLIC_KEY, ()), (ONCALL_KEY, GROUPS)):
            for question in QUESTIONS:
                for mode in ("hybrid", "graph", "vector", "global"):
                    answer = client(url, key).post("/v1/search", json={"question": question, "mode": mode})
                    assert answer.status_code == 200, answer.text
                    got = answer.json()
                    expected = index.query(question, mode=mode, groups=groups).to_dict()
                    assert got.pop("index_version") == index.version
                    got.pop("timings_ms"), expected.pop("timings_ms")
                    assert got == json.loads(json.dumps(expected)), (key, question, mode)


def test_context_answers_what_the_query_module_answers_and_hides_what_the_key_may_not_read(served):
    settings, url, _, _ = served
    with open_index(settings=settings) as index:
        for key, groups in ((PUBLIC_KEY, ()), (ONCALL_KEY, GROUPS)):
            for subject in ("checkout-service", "What does checkout-service call?"):
                answer = client(url, key).post("/v1/context", json={"subject": subject})
                assert answer.status_code == 200, answer.text
                got = answer.json()
                expected = index.context(subject, groups=groups)
                assert got.pop("index_version") == index.version
                assert got == json.loads(json.dumps({**expected.to_dict(), "markdown": expected.to_markdown()}))
    public = client(url, PUBLIC_KEY).post("/v1/context", json={"subject": "checkout-service"}).text
    oncall = client(url, ONCALL_KEY).post("/v1/context", json={"subject": "checkout-service"}).text
    assert leaked(public) == set() and "ledger-db" in oncall  # only a restricted page says it calls ledger-db
    assert client(url, PUBLIC_KEY).post("/v1/context", json={"subject": " "}).status_code == 422
    # JSON Schema's integer includes 2.0: a whole-number float is taken (schemathesis's ST202), true and "1" are not
    assert client(url, PUBLIC_KEY).post("/v1/context", json={"subject": "checkout-service", "max_hops": 1.0}
                                        ).status_code == 200
    for body in ({"subject": "x", "max_hops": 9}, {"subject": "x", "max_hops": True}, {"subject": "x", "max_hops": "1"}):
        assert client(url, PUBLIC_KEY).post("/v1/context", json=body).status_code == 422, body
    for body in ({"question": "x", "top_k": True}, {"question": "x", "top_k": "5"}):
        assert client(url, PUBLIC_KEY).post("/v1/search", json=body).status_code == 422, body


def test_a_key_without_the_group_sees_nothing_only_a_restricted_document_supplies(served):
    settings, url, _, _ = served
    public, oncall = client(url, PUBLIC_KEY), client(url, ONCALL_KEY)
    for question in QUESTIONS:
        for mode in ("hybrid", "graph", "vector", "keyword", "global"):
            body = {"question": question, "mode": mode, "results": "chunks", "top_k": 20}
            answer = public.post("/v1/search", json=body).json()
            assert answer.pop("question") == question  # echoed as asked; nothing else may name what it hides
            assert leaked(json.dumps(answer)) == set(), (question, mode)
    answer = oncall.post("/v1/search", json={"question": QUESTION}).json()
    answer.pop("question")
    assert leaked(json.dumps(answer))  # the group reads it

    for path in ("/v1/entities?limit=1000", "/v1/entities?limit=1000&order_by=name", "/v1/relationships?limit=1000",
                 "/v1/graph", "/v1/index"):
        assert leaked(public.get(path).text) == set(), path
        assert public.get(path).status_code == 200
    assert leaked(oncall.get("/v1/entities?limit=1000").text)
    assert public.get("/v1/graph").json()["entities"] < oncall.get("/v1/graph").json()["entities"]
    assert public.get("/v1/graph").json()["relationships"] < oncall.get("/v1/graph").json()["relationships"]

    names = {e["name"]: e["id"] for e in oncall.get("/v1/entities?limit=1000").json()["entities"]}
    hidden = names["vault-gateway"]
    assert public.get(f"/v1/entities/{hidden}").status_code == 404
    shown = oncall.get(f"/v1/entities/{hidden}")
    assert shown.status_code == 200 and "hsm-proxy" in shown.text
    # A public entity's neighbourhood holds only the relationships and wording public documents state.
    checkout = names["checkout-service"]
    assert leaked(public.get(f"/v1/entities/{checkout}").text) == set()
    public_ends = {r["target"] for r in public.get(f"/v1/entities/{checkout}").json()["relationships"]}
    oncall_ends = {r["target"] for r in oncall.get(f"/v1/entities/{checkout}").json()["relationships"]}
    assert "ledger-db" in oncall_ends - public_ends  # only the restricted page relates the two


def test_callers_cannot_choose_their_groups_and_need_a_known_key(served):
    _, url, _, _ = served
    for key in (None, "not-a-key", key_digest(ONCALL_KEY)):  # no key, a wrong one, the stored digest itself
        answer = client(url, key).post("/v1/search", json={"question": QUESTION})
        assert answer.status_code == 401 and "error" in answer.json() and answer.headers["www-authenticate"]
    sneaky = client(url, PUBLIC_KEY).post("/v1/search", json={"question": QUESTION, "groups": GROUPS})
    assert sneaky.status_code == 422 and "groups" in sneaky.json()["error"]
    for headers in ({"X-API-Key": ONCALL_KEY}, {"Authorization": f"bearer {ONCALL_KEY}"}):  # the scheme is any case
        answer = httpx.post(f"{url}/v1/search", headers=headers, json={"question": QUESTION}, timeout=60)
        assert answer.status_code == 200 and leaked(answer.text), headers


@pytest.mark.parametrize(("method", "path", "body", "status", "says"), [
    ("post", "/v1/search", {"question": "x", "mode": "telepathy"}, 422, "mode"),
    ("post", "/v1/search", {"question": "x", "top_k": 0}, 422, "top_k"),
    ("post", "/v1/search", {"question": "x", "top_k": 51}, 422, "top_k"),
    ("post", "/v1/search", {"question": "x", "max_hops": 9}, 422, "max_hops"),
    ("post", "/v1/search", {"question": ""}, 422, "question"),
    ("post", "/v1/search", {"question": "   "}, 422, "body.question: is blank"),
    ("post", "/v1/search", {"question": "word " * 1000}, 422, "at most 2000"),  # the schema says maxLength
    ("post", "/v1/search", {"question": "x", "top_k": 2.5}, 422, "top_k"),
    ("post", "/v1/search", {}, 422, "question"),
    ("post", "/v1/search", "not json", 422, "invalid"),
    ("get", "/v1/entities?offset=-1", None, 422, "offset"),
    ("get", "/v1/entities?limit=100000", None, 422, "limit"),
    ("get", "/v1/entities?order_by=colour", None, 422, "order_by"),
    ("get", "/v1/entities/no-such-entity", None, 404, "no entity"),
    ("get", "/v1/nothing-here", None, 404, "Not Found"),
])
def test_bad_input_is_a_4xx_json_error_that_says_what_is_wrong(served, method, path, body, status, says):
    _, url, _, _ = served
    http = client(url, PUBLIC_KEY)
    if method == "post":
        answer = (http.post(path, content=body, headers={"content-type": "application/json"})
                  if isinstance(body, str) else http.post(path, json=body))
    else:
        answer = http.get(path)
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/json"
    assert says in answer.json()["error"]
    assert "Traceback" not in answer.text


def test_health_readiness_and_the_openapi_document(served):
    _, url, _, _ = served
    assert httpx.get(f"{url}/healthz").json() == {"status": "ok", "version": None}
    ready = httpx.get(f"{url}/readyz").json()
    assert ready["status"] == "ready" and ready["version"]
    paths = httpx.get(f"{url}/openapi.json").json()["paths"]
    assert {"/v1/search", "/v1/index", "/v1/graph", "/v1/entities", "/v1/relationships", "/v1/entities/{entity_id}",
            "/healthz", "/readyz"} <= set(paths)
    assert "SearchRequest" in json.dumps(paths["/v1/search"])
    document = httpx.get(f"{url}/openapi.json").json()
    # Typed answers: every /v1 route's 200 names its schema, and the search answer's fields are the module's.
    for path, operations in paths.items():
        for operation in operations.values():
            if path.startswith("/v1"):
                assert "$ref" in json.dumps(operation["responses"]["200"]), path
    answer = document["components"]["schemas"]["SearchAnswer"]["properties"]
    assert {"results", "relationships", "index_updating", "index_version"} <= set(answer)
    assert set(document["components"]["schemas"]["RelationshipRow"]["properties"]) >= {"source", "type", "target"}
    # How to authenticate, in the document: a bearer key or X-API-Key, on every /v1 route.
    assert set(document["components"]["securitySchemes"]) == {"bearer", "apiKey"}
    assert all(operation.get("security") for path, operations in paths.items() if path.startswith("/v1")
               for operation in operations.values())
    # the bounds the server enforces are in the schema (schemathesis sent top_k 0 and max_hops -157869 as valid)
    bounds = {name: next(option for option in field["anyOf"] if option.get("type") == "integer")
              for name, field in document["components"]["schemas"]["SearchRequest"]["properties"].items()
              if name in ("top_k", "max_hops")}
    assert (bounds["top_k"]["minimum"], bounds["top_k"]["maximum"]) == (1, 50)
    assert (bounds["max_hops"]["minimum"], bounds["max_hops"]["maximum"]) == (0, 3)
    # a question of blanks is refused by the schema as the server refuses it
    assert document["components"]["schemas"]["SearchRequest"]["properties"]["question"]["pattern"] == "\\S"
    assert httpx.get(f"{url}/docs").status_code == 404  # no page that loads its scripts from a CDN


def test_access_logs_name_the_caller_and_leave_questions_out(served):
    _, url, _, log = served
    client(url, PUBLIC_KEY).post("/v1/search", json={"question": "Where is the ledger-db runbook?"})
    deadline = time.monotonic() + 10
    while not any('"/v1/search"' in line and "public-bot" in line for line in log) and time.monotonic() < deadline:
        time.sleep(0.1)
    records = [json.loads(line) for line in log if line.startswith("{")]
    search = [r for r in records if r["path"] == "/v1/search" and r["caller"] == "public-bot"]
    assert search and all(set(r) == {"method", "path", "status", "ms", "caller"} for r in search)
    assert not any("ledger-db runbook" in line for line in log)
    assert not any(PUBLIC_KEY in line or ONCALL_KEY in line for line in log)


def test_a_newly_published_version_is_answered_without_a_restart(served):
    settings, url, corpus, _ = served
    question = "Which team owns the fraud-scorer service?"
    before = client(url, PUBLIC_KEY).post("/v1/search", json={"question": question}).json()
    (corpus / "fraud.md").write_text("# Fraud scorer\n\nfraud-scorer is owned by team-risk and calls payments-api.\n")
    build(settings)
    after = client(url, PUBLIC_KEY).post("/v1/search", json={"question": question}).json()
    assert after["index_version"] != before["index_version"]
    assert after["results"][0]["doc_id"] == "t:fraud.md"


class BlockingIndex:
    """An open index whose questions wait for a signal: saturation and timeouts without racing real work."""

    def __init__(self, index, release: threading.Event):
        self._index, self._release = index, release
        self.state, self.graph, self.embedder, self.version = index.state, index.graph, index.embedder, index.version

    def query(self, question, **options):
        self._release.wait(30)
        return self._index.query(question, **options)


def test_a_saturated_server_answers_429_and_a_slow_request_504(served):
    settings, _, _, _ = served
    limited = settings.with_overrides(server={"max_concurrent_requests": 1, "request_timeout_seconds": 1})
    release = threading.Event()
    with open_index(settings=settings) as index:
        app = create_app(BlockingIndex(index, release), limited, KeyRing.from_config(settings.server, environ={}))
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        port = server.servers[0].sockets[0].getsockname()[1]

        async def two_at_once():
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30,
                                         headers={"Authorization": f"Bearer {PUBLIC_KEY}"}) as http:
                first = asyncio.create_task(http.post("/v1/search", json={"question": QUESTION}))
                await asyncio.sleep(0.3)  # the first holds the only slot (it waits for the release)
                second = await http.post("/v1/search", json={"question": QUESTION})
                return await first, second

        try:
            slow, refused = asyncio.run(two_at_once())
            assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
            assert "at once" in refused.json()["error"]
            assert slow.status_code == 504 and "longer than 1 s" in slow.json()["error"]
            release.set()
            deadline = time.monotonic() + 30  # the timed-out work finishes and frees its slot
            while time.monotonic() < deadline:
                answer = httpx.post(f"http://127.0.0.1:{port}/v1/search", json={"question": QUESTION},
                                    headers={"Authorization": f"Bearer {PUBLIC_KEY}"}, timeout=30)
                if answer.status_code != 429:
                    break
                time.sleep(0.1)
            assert answer.status_code == 200
        finally:
            release.set()
            server.should_exit = True
            thread.join(30)


def test_serve_refuses_to_start_without_any_key(tmp_path):
    config = tmp_path / "graphrag.yaml"
    config.write_text(yaml.safe_dump({"index_dir": str(tmp_path / "index"), "server": {"api_keys_env": None}}))
    done = subprocess.run([*CLI, "serve"], cwd=tmp_path, env=cli_env(config), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and "no API key is configured" in done.stderr and "Traceback" not in done.stderr


def test_api_keys_in_the_environment_are_validated_without_echoing_them():
    settings = load_settings()
    with pytest.raises(ValueError, match=r"\$GRAPHRAG_API_KEYS is not a JSON list of API keys") as error:
        KeyRing.from_config(settings.server, environ={"GRAPHRAG_API_KEYS": '[{"name": "x", "sha256": "secret"}]'})
    assert "secret" not in str(error.value)
    ring = KeyRing.from_config(settings.server, environ={"GRAPHRAG_API_KEYS": json.dumps(
        [{"name": "a", "sha256": key_digest("k"), "groups": ["sre"]}])})
    assert ring.caller("k").groups == ("sre",) and ring.caller("K") is None and ring.caller("") is None


def test_a_huge_body_or_header_is_refused_before_authentication(served):
    """A 300 MB body without a key was read whole (860 MB of memory) before the 401; now the declared size is
    refused at once, a streamed one at the limit, and an oversized header by the HTTP parser."""
    _, url, _, _ = served
    declared = httpx.post(f"{url}/v1/search", content=b"x" * 2_000_000, headers={"content-type": "application/json"})
    assert declared.status_code == 413 and "over 65536 bytes" in declared.json()["error"]

    def stream():
        for _ in range(100):
            yield b"x" * 100_000

    streamed = httpx.post(f"{url}/v1/search", content=stream(), headers={"content-type": "application/json"})
    assert streamed.status_code == 413
    try:
        status = httpx.get(f"{url}/healthz", headers={"x-padding": "y" * 200_000}).status_code
    except httpx.HTTPError:
        status = None  # the parser may close the connection without an answer
    assert status is None or status >= 400
    assert httpx.get(f"{url}/healthz").status_code == 200  # and the server goes on


class HugeAnswers:
    """An open index whose answers carry a 100 kB passage each (what a bloated document would give)."""

    def __init__(self, index):
        self._index = index
        self.state, self.graph, self.embedder, self.version = index.state, index.graph, index.embedder, index.version

    def query(self, question, **options):
        from dataclasses import replace

        response = self._index.query(question, **options)
        return replace(response, results=[replace(r, text="x" * 100_000) for r in response.results])


def test_an_answer_over_max_response_bytes_is_refused_with_the_reason(served):
    """A 47 MB answer once blocked the event loop while it was serialized: answers are now rendered in the pool,
    under the time limit, and one over ``max_response_bytes`` is refused with the reason."""
    from fastapi.testclient import TestClient

    settings, _, _, _ = served
    small = settings.with_overrides(server={"max_response_bytes": 65536})
    with open_index(settings=settings) as index, TestClient(
            create_app(HugeAnswers(index), small, KeyRing.from_config(settings.server, environ={}))) as http:
        headers = {"Authorization": f"Bearer {PUBLIC_KEY}"}
        refused = http.post("/v1/search", json={"question": QUESTION, "top_k": 3}, headers=headers)
        assert refused.status_code == 500 and "over the server's max_response_bytes (65536)" in refused.json()["error"]
        assert http.get("/v1/graph", headers=headers).status_code == 200  # small answers still go out
