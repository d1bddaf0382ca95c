"""`graphrag-pipeline`: query, explore and evaluate an index from the shell (JSON with --json)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Sequence

from graphrag_pipeline.lib.core.errors import GraphRAGError
from graphrag_pipeline.lib.core.progress import TerminalProgressBar
from graphrag_pipeline.lib.core.query_options import FUSIONS, GRANULARITIES, MODES


def _print(payload: Any, as_json: bool, text: str) -> None:
    print(json.dumps(payload, indent=2, default=str) if as_json else text)


CONFIG_HELP = "pipeline YAML (default: $GRAPHRAG_CONFIG, else ./graphrag.yaml)"
INDEX_DIR_HELP = "index directory (overrides the configuration)"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="graphrag-pipeline", description=__doc__)
    parser.add_argument("--config", help=CONFIG_HELP)
    parser.add_argument("--index-dir", help=INDEX_DIR_HELP)
    # The same flags after the subcommand. Their SUPPRESS default leaves the value given before the subcommand in
    # place when they are absent; given in both places, the later one (after the subcommand) wins, as a repeated
    # flag does anywhere else on a command line.
    config_flag = argparse.ArgumentParser(add_help=False)
    config_flag.add_argument("--config", default=argparse.SUPPRESS, help=CONFIG_HELP)
    index_dir_flag = argparse.ArgumentParser(add_help=False)
    index_dir_flag.add_argument("--index-dir", default=argparse.SUPPRESS, help=INDEX_DIR_HELP)
    commands = parser.add_subparsers(dest="command", required=True)

    query = commands.add_parser("query", parents=[config_flag, index_dir_flag], help="ask a question")
    query.add_argument("question", help="the question, in the words of the corpus where possible")
    query.add_argument("--mode", choices=MODES, default="hybrid",
                       help="hybrid (default: every signal fused), vector, keyword (BM25), graph, or global "
                            "(community summaries, for broad questions)")
    query.add_argument("--top-k", type=int, default=None, help="results (default: retrieval.top_k, 10)")
    query.add_argument("--max-hops", type=int, default=None,
                       help="graph hops from the question's entities, 0-3 (default: retrieval.max_hops, 2)")
    query.add_argument("--fusion", choices=FUSIONS, default=None,
                       help="how hybrid mode combines its signals: weighted sum or reciprocal-rank fusion "
                            "(default: retrieval.fusion, weighted)")
    query.add_argument("--results", choices=GRANULARITIES, default=None,
                       help="documents (default: distinct documents with their best passages) or chunks")
    query.add_argument("--group", action="append", default=[], dest="groups",
                       help="an access group of the caller (repeatable); without any, only unrestricted documents")
    query.add_argument("--json", action="store_true", help="the whole response as JSON (scores, paths, facts)")

    context = commands.add_parser(
        "context", parents=[config_flag, index_dir_flag],
        help="the incident context of a service: dependencies, dependents, owners, runbooks, as facts")
    context.add_argument("subject", help="a service's name, or a question about one")
    context.add_argument("--max-hops", type=int, default=None,
                         help="how far dependencies and dependents are followed (default: retrieval.context.max_hops)")
    context.add_argument("--group", action="append", default=[], dest="groups",
                         help="an access group of the caller (repeatable); without any, only unrestricted documents")
    context.add_argument("--json", action="store_true", help="JSON instead of Markdown")

    graph = commands.add_parser("graph", parents=[config_flag, index_dir_flag], help="explore the graph")
    graph.add_argument("what", choices=("stats", "entities", "relationships"), help="what to list")
    graph.add_argument("--offset", type=int, default=0, help="rows to skip (default: 0)")
    graph.add_argument("--limit", type=int, default=20, help="rows to list (default: 20)")
    graph.add_argument("--order-by", choices=("mention_count", "name"), default="mention_count",
                       help="entities' order (default: mention_count)")
    graph.add_argument("--group", action="append", default=[], dest="groups",
                       help="an access group of the caller (repeatable); without any, only unrestricted documents")
    graph.add_argument("--json", action="store_true", help="JSON instead of a table")

    serve = commands.add_parser("serve", parents=[config_flag, index_dir_flag],
                                help="answer questions and graph exploration over HTTP (server.* in the configuration)")
    serve.add_argument("--host", help="address to listen on (default: server.host, 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default: server.port; 0: any free port)")

    mcp = commands.add_parser("mcp", parents=[config_flag, index_dir_flag],
                              help="the MCP server: search_knowledge, incident_context, explore_entity, graph_overview")
    mcp.add_argument("--transport", choices=("stdio", "http"), default="stdio",
                     help="stdio (the groups of the key in $GRAPHRAG_MCP_KEY) or streamable HTTP at /mcp (each "
                          "request's bearer key)")
    mcp.add_argument("--host", help="address for --transport http (default: server.host)")
    mcp.add_argument("--port", type=int, help="port for --transport http (default: server.port; 0: any free port)")

    build = commands.add_parser("build", parents=[config_flag, index_dir_flag],
                                help="run all eight stages in this process, without Dagster")
    build.add_argument("--json", action="store_true", help="JSON report, and no progress bar")

    commands.add_parser("repair", parents=[config_flag, index_dir_flag],
                        help="check the index's SQLite files and set damaged ones aside for the next build to re-derive")

    export = commands.add_parser("export", parents=[config_flag, index_dir_flag],
                                 help="write the index as Parquet tables and a manifest (an operator's backup)")
    export.add_argument("directory", help="where to write the tables and the manifest (created if missing)")
    export.add_argument("--all", action="store_true", dest="everything",
                        help="required: the export holds every document's text, restricted ones included")
    load = commands.add_parser("import", parents=[config_flag, index_dir_flag],
                               help="load an export into the configured backends, without embedding or extracting")
    load.add_argument("directory", help="an export's directory")
    load.add_argument("--json", action="store_true", help="JSON report")

    # eval builds its own index (in --work-dir or a temporary folder), so it takes no --index-dir.
    evaluate = commands.add_parser("eval", parents=[config_flag],
                                   help="build an index for an eval-set folder and score retrieval")
    evaluate.add_argument("set_dir", help="an eval-set folder: corpus.jsonl, questions.jsonl, optional "
                                           "extraction.jsonl and catalog/")
    evaluate.add_argument("--use-extraction", action="store_true", help="use the set's extraction.jsonl")
    evaluate.add_argument("--work-dir", help="keep the index here instead of a temporary folder")
    evaluate.add_argument("--json", action="store_true", help="JSON report, and no progress bar")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        code = _main(argv)
        sys.stdout.flush()  # output that fit in the buffer meets a closed pipe here, not at interpreter exit
    except BrokenPipeError:
        # The reader stopped early (`| head -3`): its choice, not an error worth a traceback. Python flushes stdout
        # once more at exit and would fail the same way, so stdout now goes to devnull. 141 = 128 + SIGPIPE, the
        # status a shell reports for any tool the pipe closed on.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return code


def _main(argv: Sequence[str] | None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "eval" and args.index_dir:
        parser.error("eval builds its own index: use --work-dir to keep it, not --index-dir")
    try:
        return _run(args)
    # the pipeline's own errors, whatever their kind, and the OS's and the values' it passes on: one line, no traceback
    except (GraphRAGError, FileNotFoundError, ValueError) as error:
        print(f"graphrag-pipeline: {error}", file=sys.stderr)
        return 2


def _progress_bar(args: argparse.Namespace) -> TerminalProgressBar | None:
    """The build's progress for a person at a terminal: never with --json (a script reads the output) and drawn
    only when stderr is a terminal (the bar checks)."""
    return None if args.json else TerminalProgressBar(sys.stderr)


def _run(args: argparse.Namespace) -> int:
    if args.command == "eval":
        from graphrag_pipeline.evaluation import evaluate, format_table
        from graphrag_pipeline.lib.core.config import load_settings

        bar = _progress_bar(args)
        try:
            report = evaluate(args.set_dir, work_dir=args.work_dir, use_extraction=args.use_extraction,
                              base_settings=load_settings(args.config),
                              progress_listeners=[bar] if bar is not None else [])
        finally:
            if bar is not None:
                bar.close()
        _print(report, args.json, format_table(report) if not args.json else "")
        return 0
    if args.command == "build":
        return _build(args)
    if args.command == "repair":
        return _repair(args)
    if args.command in ("export", "import"):
        return _export_or_import(args)
    if args.command == "serve":
        return _serve(args)
    if args.command == "mcp":
        return _mcp(args)

    from graphrag_pipeline.query import open_index

    with open_index(args.config, index_dir=args.index_dir) as index:
        if args.command == "query":
            response = index.query(args.question, mode=args.mode, top_k=args.top_k, max_hops=args.max_hops,
                                   fusion=args.fusion, groups=args.groups, results=args.results)
            _print(response.to_dict(), args.json, _format_response(response))
        elif args.command == "context":
            found = index.context(args.subject, max_hops=args.max_hops, groups=args.groups)
            _print(found.to_dict(), args.json, found.to_markdown())
        else:
            from graphrag_pipeline.query import explore

            if args.what == "stats":
                payload = explore.graph_stats(index, groups=args.groups)
                text = _format_stats(payload)
            elif args.what == "entities":
                payload = explore.list_entities(index, groups=args.groups, offset=args.offset, limit=args.limit,
                                                order_by=args.order_by)
                text = _format_page(payload, "entities", ("name", "type", "mention_count", "documents", "description"))
            else:
                payload = explore.list_relationships(index, groups=args.groups, offset=args.offset, limit=args.limit)
                text = _format_page(payload, "relationships", ("source", "type", "target", "weight", "documents"))
            _print(payload, args.json, text)
    return 0


def _server_settings(args: argparse.Namespace):
    """The settings, the server section with the command line's host and port, and the key ring (refused empty)."""
    from graphrag_pipeline.lib.core.config import load_settings
    from graphrag_pipeline.server.auth import KeyRing

    overrides = {"index_dir": args.index_dir} if args.index_dir else {}
    settings = load_settings(args.config, **overrides)
    server = settings.server.model_copy(update={k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None})
    keys = KeyRing.from_config(server)
    if not len(keys):
        raise ValueError(f"no API key is configured: add server.api_keys (name, sha256 of the key, groups) or "
                         f"${server.api_keys_env}; without one every request would be refused")
    return settings, server, keys


def _mcp(args: argparse.Namespace) -> int:
    import socket

    import uvicorn

    from graphrag_pipeline.query import open_index
    from graphrag_pipeline.server.limits import BodyLimit
    from graphrag_pipeline.server.mcp import STDIO_KEY_ENV, create_mcp, token_caller

    settings, server_config, keys = _server_settings(args)
    if args.transport == "stdio":
        caller = keys.caller(os.environ.get(STDIO_KEY_ENV))
        if caller is None:
            raise ValueError(f"${STDIO_KEY_ENV} must hold a configured API key: its groups are the agent's")
        with open_index(settings=settings) as index:
            create_mcp(index, lambda: caller).run("stdio")
        return 0
    listener = socket.create_server((server_config.host, server_config.port))  # bound first: the URL names the port
    url = f"http://{server_config.host}:{listener.getsockname()[1]}/mcp"
    with open_index(settings=settings) as index:
        index.embedder.embed(["warm-up"])
        app = create_mcp(index, token_caller, keys=keys, public_url=url).streamable_http_app(host=server_config.host)
        print(f"MCP server (streamable HTTP) at {url}", file=sys.stderr, flush=True)
        uvicorn.Server(uvicorn.Config(BodyLimit(app, server_config.max_request_bytes), log_level="warning",
                                      http="h11", h11_max_incomplete_event_size=server_config.max_header_bytes,
                                      )).run(sockets=[listener])
    return 0


def _serve(args: argparse.Namespace) -> int:
    import logging

    import uvicorn

    from graphrag_pipeline.query import open_index
    from graphrag_pipeline.server.app import create_app
    from graphrag_pipeline.server.limits import BodyLimit

    settings, server, keys = _server_settings(args)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with open_index(settings=settings) as index:
        index.embedder.embed(["warm-up"])  # the model loads before the first caller waits for it
        app = create_app(index, settings.with_overrides(server=server.model_dump()), keys)
        uvicorn.run(BodyLimit(app, server.max_request_bytes), host=server.host, port=server.port, log_level="info",
                    access_log=False, http="h11", h11_max_incomplete_event_size=server.max_header_bytes)
    return 0


def _build(args: argparse.Namespace) -> int:
    from graphrag_pipeline.lib.compose.workspace import Workspace
    from graphrag_pipeline.lib.core.config import load_settings
    from graphrag_pipeline.lib.sources.registry import check_local_paths
    from graphrag_pipeline.lib.stages import build_everything

    overrides = {"index_dir": args.index_dir} if args.index_dir else {}
    settings = load_settings(args.config, **overrides)
    check_local_paths(settings.sources)
    bar = _progress_bar(args)
    workspace = Workspace(settings, progress_listeners=[bar] if bar is not None else [])
    try:
        with workspace.state.whole_build():
            reports = build_everything(workspace)
    finally:
        workspace.close()
        if bar is not None:
            bar.close()
    payload = [{"stage": r.stage, "seconds": r.total_seconds, **r.counts} for r in reports]
    _print(payload, args.json, "\n".join(f"{r.stage:<20} {r.total_seconds:>8.1f}s  {r.counts}" for r in reports))
    return 0


def _export_or_import(args: argparse.Namespace) -> int:
    from graphrag_pipeline.lib.compose.workspace import Workspace
    from graphrag_pipeline.lib.core.config import load_settings
    from graphrag_pipeline.lib.index.parquet_io import export_index, import_index

    if args.command == "export" and not args.everything:
        raise ValueError("an export holds every document's text, restricted ones included, unfiltered by access "
                         "groups: pass --all to write it (an operator's backup; keep it where the index is kept)")
    workspace = Workspace(load_settings(args.config, **({"index_dir": args.index_dir} if args.index_dir else {})))
    try:
        if args.command == "export":
            manifest = export_index(workspace, args.directory)
            print(json.dumps(manifest, indent=2))
            return 0
        with workspace.state.whole_build():
            reports = import_index(workspace, args.directory)
    finally:
        workspace.close()
    payload = [{"stage": r.stage, "seconds": r.total_seconds, **r.counts} for r in reports]
    _print(payload, args.json, "\n".join(f"{r.stage:<20} {r.total_seconds:>8.1f}s  {r.counts}" for r in reports))
    return 0


def _repair(args: argparse.Namespace) -> int:
    """Set damaged SQLite files aside (under the build lock, so no build is writing them). The next build re-derives
    them: a new state from the sources (and, through reconciliation, the graph and vectors from it), a new graph
    from the state; the LLM caches start empty."""
    from graphrag_pipeline.lib.compose import backends
    from graphrag_pipeline.lib.core.config import load_settings
    from graphrag_pipeline.lib.stores.sqlite_files import integrity_problem, set_aside
    from graphrag_pipeline.lib.stores.state.sqlite import build_lock

    settings = load_settings(args.config, **({"index_dir": args.index_dir} if args.index_dir else {}))
    files = [backends.state_path(settings), backends.llm_cache_path(settings), backends.llm_runs_path(settings)]
    if settings.backends.graph != "neo4j":
        files.append(backends.graph_path(settings))
    set_aside_count = 0
    with build_lock(settings.index_dir):
        for path in files:
            if not path.exists():
                continue
            problem = integrity_problem(path)
            if problem is None:
                print(f"{path}: ok")
            else:
                print(f"{path}: damaged ({problem}); moved to {set_aside(path)}")
                set_aside_count += 1
    if set_aside_count:
        print("now build again (`graphrag-pipeline build`, or the build_index job) to re-derive what was set aside")
    return 0


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns padded to their widest cell; numeric columns right-aligned so counts line up by their last digit."""
    numeric = [all(isinstance(row[i], (int, float)) for row in rows) for i in range(len(header))]
    cells = [list(header)] + [[_cell(value) for value in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.rjust(width) if right else cell.ljust(width)
                  for cell, width, right in zip(row, widths, numeric)).rstrip()
        for row in cells
    )


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    text = " ".join(str(value).split())  # a description's line breaks would break the row
    return text if len(text) <= 60 else text[:59] + "…"


def _format_stats(stats: dict[str, Any]) -> str:
    totals = [("entities", stats["entities"]), ("relationships", stats["relationships"]),
              ("chunks with mentions", stats["chunks_with_mentions"])]
    return "\n\n".join([
        _table(("in the graph", "count"), totals),
        _table(("entity type", "count"), list(stats["top_entity_types"].items())),
        _table(("relationship type", "count"), list(stats["relationship_types"].items())),
    ])


def _format_page(page: dict[str, Any], key: str, columns: Sequence[str]) -> str:
    rows = page[key]
    if not rows:
        return f"no {key} at offset {page['offset']}"
    header = [column.replace("_", " ") for column in columns]
    text = _table(header, [[row[column] for column in columns] for row in rows])
    if len(rows) == page["limit"]:  # a full page: there may be more
        text += f"\n(next page: --offset {page['offset'] + page['limit']})"
    return text


def _format_response(response) -> str:
    lines = [f"Q: {response.question}  [{response.mode}"
             + (", no entity linked: plain vector search" if response.fell_back_to_vector else "") + "]"]
    if response.entities_mentioned:
        lines.append("entities: " + ", ".join(f"{e.name} ({e.type})" for e in response.entities_mentioned[:10]))
    for position, result in enumerate(response.results, start=1):
        title = result.source.get("title", "")
        path = " → ".join(result.entity_path)
        shown = ", ".join(f"{name} {value:.3f}" for name, value in result.scores.items() if value or name == "vector")
        lines.append(f"{position:>2}. {result.combined_score:.3f} ({shown}, hops {result.hops_from_query}) "
                     f"{title} [{result.doc_id}]")
        if path:
            lines.append(f"    via {path}")
        lines.append("    " + " ".join(result.text.split())[:200])
    if response.relationships:
        lines.append("relationships:")
        lines += [f"  {r.source} -[{r.type}]-> {r.target}" + ("  (asked for)" if r.followed else "")
                  for r in response.relationships[:10]]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
