"""Query latency on a large embedded index made of copies of an eval set (not a test: run it by hand).

    python -m graphrag_pipeline_tests.benchmarks.bench_query_scale <eval-set-dir> [--copies 51] [--queries N]
                                                                   [--work-dir D]

Writes ``--copies`` copies of the set's passages under new ids (``<id>~<n>``, same titles and texts) with the set's
``extraction.jsonl``, builds them with the pipeline's stages (the copies' texts hit the embedding cache, so the build
costs about one copy's embeddings), and times every mode over the set's questions with one thread for the question's
embedding and NumPy (OPENBLAS_NUM_THREADS=1), as a query process serving one question per core runs.

The copies share their entities, so the graph keeps one copy's entities and relationships while every entity is
mentioned in ``--copies`` times as many chunks, and each question's nearest chunks come in identical groups: a
heavier load for the graph walk and the fusion than as many distinct documents would be, not a lighter one.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy is imported: the query process's one thread

import argparse  # noqa: E402
import json  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

from graphrag_pipeline.evaluation import eval_settings, load_questions, source_name_for  # noqa: E402
from graphrag_pipeline.lib.compose.workspace import Workspace  # noqa: E402
from graphrag_pipeline_tests.benchmarks.bench_pipeline import build_index, du, measure_queries  # noqa: E402


def write_copies(set_dir: Path, target: Path, copies: int) -> None:
    """``copies`` copies of the set's corpus and extraction under new ids; the questions as they are."""
    target.mkdir(parents=True)
    for name in ("corpus.jsonl", "extraction.jsonl"):
        records = [json.loads(line) for line in (set_dir / name).read_text().splitlines() if line.strip()]
        with (target / name).open("w") as out:
            for copy in range(copies):
                for record in records:
                    out.write(json.dumps({**record, "id": f"{record['id']}~{copy}"}) + "\n")
    (target / "questions.jsonl").write_text((set_dir / "questions.jsonl").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("set_dir", type=Path, help="eval-set folder with corpus.jsonl, extraction.jsonl, questions.jsonl")
    parser.add_argument("--copies", type=int, default=51, help="copies of the corpus (51 of musique-100: 100k chunks)")
    parser.add_argument("--queries", type=int, default=None, help="time only the first N questions")
    parser.add_argument("--work-dir", type=Path, help="keep the copies and the index here (default: a temporary folder)")
    args = parser.parse_args()
    if not (args.set_dir / "extraction.jsonl").is_file():
        parser.error(f"{args.set_dir / 'extraction.jsonl'} is missing: the copies are built from the set's extraction")
    if args.copies < 1:
        parser.error("--copies must be at least 1")
    with tempfile.TemporaryDirectory(prefix="bench-query-scale-") as scratch:
        work = args.work_dir or Path(scratch)
        copied = work / source_name_for(args.set_dir)
        if not copied.is_dir():
            write_copies(args.set_dir, copied, args.copies)
        questions = [q.question for q in load_questions(copied, source_name_for(copied))][: args.queries]
        print(f"{args.copies} copies of {args.set_dir}")
        if (work / "index" / "state.sqlite").is_file():  # built by an earlier run with this --work-dir
            settings = eval_settings(copied, work / "index", use_extraction=True)
        else:  # the copies' texts are one copy's: the raw model on all of them would only time the cache's misses
            settings = build_index(copied, work / "index", use_extraction=True, raw_model_ratios=False)
        with Workspace(settings) as workspace:
            chunks = workspace.state.chunk_count()
        print(f"index on disk: {du(work / 'index') / 1e6:.0f} MB for {chunks} chunks")
        measure_queries(settings, questions)


if __name__ == "__main__":
    main()
