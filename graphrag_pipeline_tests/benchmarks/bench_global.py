"""Global mode on an eval set, scored by the documents its communities cite (not a test: run it by hand).

    python -m graphrag_pipeline_tests.benchmarks.bench_global <eval-set-dir> <index-dir> [--top-k N]

The index is the one `graphrag-pipeline eval <eval-set-dir> --work-dir <index-dir>` built. Eval questions ask for
passages, not topics, so this is a proxy for how well community vectors point at the right part of the corpus:
the share of each question's gold documents among the citations of the top communities, and among their first
citations only (what a result shows first).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from graphrag_pipeline.evaluation import eval_settings, load_questions, source_name_for
from graphrag_pipeline.query import open_index


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("set_dir", type=Path)
    parser.add_argument("index_dir", type=Path)
    parser.add_argument("--top-k", type=int, default=5)
    args = parser.parse_args()
    settings = eval_settings(args.set_dir, args.index_dir, False)
    questions = load_questions(args.set_dir, source_name_for(args.set_dir))
    cited_recall, first_recall = [], []
    with open_index(settings=settings) as index:
        for question in questions:
            results = index.query(question.question, mode="global", top_k=args.top_k).results
            gold = set(question.gold_doc_ids)
            cited = {citation.doc_id for result in results for citation in result.citations}
            cited_recall.append(len(gold & cited) / len(gold))
            first_recall.append(len(gold & {result.doc_id for result in results}) / len(gold))
    print(f"{args.set_dir.name}: gold documents among the top-{args.top_k} communities' citations "
          f"{sum(cited_recall) / len(questions):.3f}, among their first citations "
          f"{sum(first_recall) / len(questions):.3f} ({len(questions)} questions)")


if __name__ == "__main__":
    main()
