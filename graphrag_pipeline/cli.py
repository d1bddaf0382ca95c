"""`graphrag-pipeline`: query, explore and evaluate an index from the shell (JSON with --json)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

from graphrag_pipeline.query.models import MODES


def _print(payload: Any, as_json: bool, text: str) -> None:
    print(json.dumps(payload, indent=2, default=str) if as_json else text)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="graphrag-pipeline", description=__doc__)
    parser.add_argument("--config", help="pipeline YAML (default: $GRAPHRAG_CONFIG, else ./graphrag.yaml)")
    parser.add_argument("--index-dir", help="index directory (overrides the configuration)")
    commands = parser.add_subparsers(dest="command", required=True)

    query = commands.add_parser("query", help="ask a question")
    query.add_argument("question")
    query.add_argument("--mode", choices=MODES, default="hybrid")
    query.add_argument("--top-k", type=int, default=None)
    query.add_argument("--max-hops", type=int, default=None)
    query.add_argument("--fusion", choices=("weighted", "rrf"), default=None)
    query.add_argument("--group", action="append", default=[], dest="groups",
                       help="an access group of the caller (repeatable); without any, only unrestricted documents")
    query.add_argument("--json", action="store_true")

    graph = commands.add_parser("graph", help="explore the graph")
    graph.add_argument("what", choices=("stats", "entities", "relationships"))
    graph.add_argument("--offset", type=int, default=0)
    graph.add_argument("--limit", type=int, default=20)
    graph.add_argument("--order-by", choices=("mention_count", "name"), default="mention_count")
    graph.add_argument("--json", action="store_true")

    build = commands.add_parser("build", help="run all eight stages in this process, without Dagster")
    build.add_argument("--json", action="store_true")

    evaluate = commands.add_parser("eval", help="build an index for an eval-set folder and score retrieval")
    evaluate.add_argument("set_dir")
    evaluate.add_argument("--use-extraction", action="store_true", help="use the set's extraction.jsonl")
    evaluate.add_argument("--work-dir", help="keep the index here instead of a temporary folder")
    evaluate.add_argument("--json", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except (FileNotFoundError, ValueError) as error:
        print(f"graphrag-pipeline: {error}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    if args.command == "eval":
        from graphrag_pipeline.evaluation import evaluate, format_table
        from graphrag_pipeline.lib.config import load_settings

        report = evaluate(args.set_dir, work_dir=args.work_dir, use_extraction=args.use_extraction,
                          base_settings=load_settings(args.config))
        _print(report, args.json, format_table(report) if not args.json else "")
        return 0
    if args.command == "build":
        return _build(args)

    from graphrag_pipeline.query import open_index

    with open_index(args.config, index_dir=args.index_dir) as index:
        if args.command == "query":
            response = index.query(args.question, mode=args.mode, top_k=args.top_k, max_hops=args.max_hops,
                                   fusion=args.fusion, groups=args.groups)
            _print(response.to_dict(), args.json, _format_response(response))
        else:
            from graphrag_pipeline.query import explore

            if args.what == "stats":
                payload = explore.graph_stats(index.graph)
            elif args.what == "entities":
                payload = explore.list_entities(index.graph, offset=args.offset, limit=args.limit,
                                                order_by=args.order_by)
            else:
                payload = explore.list_relationships(index.graph, offset=args.offset, limit=args.limit)
            _print(payload, args.json, json.dumps(payload, indent=2))
    return 0


def _build(args: argparse.Namespace) -> int:
    from graphrag_pipeline.lib.config import load_settings
    from graphrag_pipeline.lib.stages import build_everything
    from graphrag_pipeline.lib.workspace import Workspace

    overrides = {"index_dir": args.index_dir} if args.index_dir else {}
    workspace = Workspace(load_settings(args.config, **overrides))
    try:
        reports = build_everything(workspace)
    finally:
        workspace.close()
    payload = [{"stage": r.stage, "seconds": r.total_seconds, **r.counts} for r in reports]
    _print(payload, args.json, "\n".join(f"{r.stage:<20} {r.total_seconds:>8.1f}s  {r.counts}" for r in reports))
    return 0


def _format_response(response) -> str:
    lines = [f"Q: {response.question}  [{response.mode}"
             + (", no entity linked: plain vector search" if response.fell_back_to_vector else "") + "]"]
    if response.entities_mentioned:
        lines.append("entities: " + ", ".join(f"{e['name']} ({e['type']})" for e in response.entities_mentioned[:10]))
    for position, result in enumerate(response.results, start=1):
        title = result.source.get("title", "")
        path = " → ".join(result.entity_path)
        lines.append(f"{position:>2}. {result.combined_score:.3f} (vector {result.vector_score:.3f}, graph "
                     f"{result.graph_score:.3f}, hops {result.hops_from_query}) {title} [{result.doc_id}]")
        if path:
            lines.append(f"    via {path}")
        lines.append("    " + " ".join(result.text.split())[:200])
    if response.relationships:
        lines.append("relationships:")
        lines += [f"  {r['source']} -[{r['type']}]-> {r['target']}" for r in response.relationships[:10]]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
