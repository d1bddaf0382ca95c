"""The MCP server through the official SDK's client, on both transports: `graphrag-pipeline mcp` spawned over stdio,
and over streamable HTTP on 127.0.0.1. Its tools answer what the query module answers for the key's groups, and a key
without the group sees nothing a restricted document alone supplies through any tool."""

from __future__ import annotations

import json
import re
import subprocess
from contextlib import asynccontextmanager

import anyio
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from graphrag_pipeline.lib.core.config import load_settings
from graphrag_pipeline.query import open_index
from graphrag_pipeline.server.auth import key_digest
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

PUBLIC_KEY, ONCALL_KEY = "public-agent-key", "oncall-agent-key"


@pytest.fixture(scope="module")
def index_config(tmp_path_factory):
    root = tmp_path_factory.mktemp("mcp")
    _, config = write_access_config(root, server={"port": 0, "api_keys_env": None, "api_keys": [
        {"name": "public-agent", "sha256": key_digest(PUBLIC_KEY)},
        {"name": "oncall-agent", "sha256": key_digest(ONCALL_KEY), "groups": GROUPS}]})
    build(load_settings(config))
    return config


@pytest.fixture(scope="module")
def http_url(index_config):
    process = subprocess.Popen([*CLI, "mcp", "--transport", "http"], cwd=index_config.parent,
                               env=cli_env(index_config), stderr=subprocess.PIPE, text=True)
    lines = HTTP_STARTUP_LINES
    for line in process.stderr:
        lines.append(line)
        if match := re.search(r"at (http://127\.0\.0\.1:\d+/mcp)", line):
            break
    assert match, "".join(lines)
    try:
        yield match.group(1)
    finally:
        process.terminate()
        process.wait(timeout=30)


HTTP_STARTUP_LINES: list[str] = []  # what the streamable-HTTP server printed before it listened


@asynccontextmanager
async def stdio_session(config, key):
    env = {**cli_env(config), "GRAPHRAG_MCP_KEY": key}
    parameters = StdioServerParameters(command=CLI[0], args=[*CLI[1:], "mcp"], env=env, cwd=str(config.parent))
    async with stdio_client(parameters) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@asynccontextmanager
async def http_session(url, key):
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=120) as http, \
            streamable_http_client(url, http_client=http) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def call(session, tool, **arguments) -> dict:
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content
    return result.structured_content.get("result", result.structured_content)


def channels(index_config, http_url):
    return {"stdio": lambda key: stdio_session(index_config, key), "http": lambda key: http_session(http_url, key)}


@pytest.mark.parametrize("channel", ["stdio", "http"])
def test_tools_answer_as_the_query_module_and_hide_what_the_key_may_not_read(index_config, http_url, channel):
    open_session = channels(index_config, http_url)[channel]
    with open_index(config_path=index_config) as index:
        version = index.version
        expected = {key: index.query(LAUNCH_QUESTION, groups=groups).to_dict()
                    for key, groups in ((PUBLIC_KEY, ()), (ONCALL_KEY, GROUPS))}
        contexts = {key: index.context("checkout-service", groups=groups)
                    for key, groups in ((PUBLIC_KEY, ()), (ONCALL_KEY, GROUPS))}
        names = {e.name: e.entity_id for e in index.graph.get_entities(index.graph.all_entity_ids()).values()}

    async def scenario():
        seen = {}
        for key in (PUBLIC_KEY, ONCALL_KEY):
            async with open_session(key) as session:
                tools = {tool.name for tool in (await session.list_tools()).tools}
                assert tools == {"search_knowledge", "incident_context", "explore_entity", "graph_overview"}
                context = await call(session, "incident_context", subject="checkout-service")
                # as POST /v1/context and /v1/search answer: with the index version the answer came from
                assert context == json.loads(json.dumps({"index_version": version, **contexts[key].to_dict(),
                                                         "markdown": contexts[key].to_markdown()}))
                answer = await call(session, "search_knowledge", question=LAUNCH_QUESTION)
                answer.pop("timings_ms")
                assert answer == json.loads(json.dumps({"index_version": version, **{
                    k: v for k, v in expected[key].items() if k != "timings_ms"}}))
                restricted = await call(session, "search_knowledge", question=QUESTION, mode="graph")
                restricted.pop("question")
                hidden = await session.call_tool("explore_entity", {"entity_id": names["vault-gateway"]})
                seen[key] = {
                    "search": json.dumps(restricted),
                    "entity": hidden.is_error,
                    "checkout": json.dumps(await call(session, "explore_entity",
                                                      entity_id=names["checkout-service"])),
                    "overview": await call(session, "graph_overview"),
                    "context": json.dumps(context),
                }
        return seen

    seen = anyio.run(scenario)
    public, oncall = seen[PUBLIC_KEY], seen[ONCALL_KEY]
    assert leaked(public["search"]) == set() and leaked(oncall["search"])
    assert public["entity"] and not oncall["entity"]  # the restricted entity is no entity for the public key
    assert leaked(public["checkout"]) == set() and "ledger-db" in oncall["checkout"]
    assert leaked(public["context"]) == set() and "ledger-db" not in public["context"]
    assert public["overview"]["entities"] < oncall["overview"]["entities"]
    assert leaked(json.dumps(public["overview"])) == set()


def test_streamable_http_refuses_a_missing_or_unknown_key(http_url):
    for headers in ({}, {"Authorization": "Bearer not-a-key"}):
        answer = httpx2.post(http_url, headers={**headers, "Accept": "application/json, text/event-stream"},
                             json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert answer.status_code == 401, answer.text
        # An API-key server: a client is told to send a bearer key, and no OAuth metadata sends it looking for an
        # authorization server (the metadata used to name /mcp itself as one).
        assert answer.headers["www-authenticate"].startswith("Bearer ")
        assert "resource_metadata" not in answer.headers["www-authenticate"]
    origin = http_url.rsplit("/mcp", 1)[0]
    assert httpx2.get(f"{origin}/.well-known/oauth-protected-resource/mcp").status_code == 404
    assert not [line for line in HTTP_STARTUP_LINES if "Warning" in line], HTTP_STARTUP_LINES


def test_stdio_refuses_to_start_without_a_known_key(index_config):
    done = subprocess.run([*CLI, "mcp"], cwd=index_config.parent, env={**cli_env(index_config),
                                                                       "GRAPHRAG_MCP_KEY": "not-a-key"},
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and "GRAPHRAG_MCP_KEY must hold a configured API key" in done.stderr


@pytest.mark.parametrize("channel", ["stdio", "http"])
def test_a_question_over_the_length_limit_is_refused_at_once_with_a_message(index_config, http_url, channel):
    open_session = channels(index_config, http_url)[channel]

    async def scenario():
        async with open_session(PUBLIC_KEY) as session:
            refused = await session.call_tool("search_knowledge", {"question": "x" * 50_000})
            context = await session.call_tool("incident_context", {"subject": "checkout-service", "max_hops": 9})
            blank = await session.call_tool("search_knowledge", {"question": "\u00a0 "})
            misspelt = await session.call_tool("search_knowledge", {"question": "checkout", "topk": 3})
            answered = await call(session, "graph_overview")
            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
            return refused, context, blank, misspelt, answered, tools

    refused, context, blank, misspelt, answered, tools = anyio.run(scenario)
    # an argument the tool does not have is refused, as the HTTP API refuses an unknown field, and the schema says so
    assert misspelt.is_error and misspelt.content[0].text.startswith(
        "search_knowledge: topk is not an argument of this tool (it takes question, ")
    assert all(tool.input_schema.get("additionalProperties") is False for tool in tools.values())
    assert blank.is_error and "question is blank" in blank.content[0].text
    search = tools["search_knowledge"].input_schema["properties"]
    assert search["top_k"]["maximum"] == 50 and search["top_k"]["description"] and {"fusion", "results"} <= set(search)
    assert all(tool.annotations.read_only_hint for tool in tools.values())
    # The reason in one line, not only "Error executing tool", nor pydantic's report echoing the 50,000 characters.
    assert refused.is_error
    assert refused.content[0].text == "search_knowledge: question: string should have at most 2000 characters"
    assert context.is_error
    assert context.content[0].text == "incident_context: max_hops: input should be less than or equal to 3"
    assert answered["entities"] > 0  # the server goes on answering
