"""Benchmark of a daily re-sync after a small share of documents changed (not a test: run it by hand).

    python -m graphrag_pipeline_tests.benchmarks.bench_resync [--corpus data/corpus] [--eval-set DIR ...]
                                                              [--share 0.01] [--seed 7]

Copies the corpus (plus, as one Markdown file per passage, the `corpus.jsonl` of each `--eval-set`: the three sets
beside the project give 3,166 documents with the sample corpus), builds it from scratch (models loaded beforehand, so
both builds pay only for work), edits ``share`` of its documents (one paragraph appended to each, at least one
document), re-syncs the shards holding them — what the source sensor's run does — and prints both wall times, per
stage, and the re-sync as a share of the full build. Then it re-syncs the same shards once more, with nothing
changed: the floor of a re-sync of those shards (what it reads to find that nothing changed, and its fixed costs).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from pathlib import Path

from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.core.config import load_settings
from graphrag_pipeline.lib.core.ids import stable_shard
from graphrag_pipeline.lib.extract.offline import load_spacy
from graphrag_pipeline.lib.stages import StageReport, build_everything
from graphrag_pipeline_tests.benchmarks.bench_pipeline import compact_counts

EDIT = "\n\n## Change log\n\nOn-call note: escalate to team-platform-oncall when this alert fires twice in an hour.\n"


def timed_build(settings, shards=None) -> tuple[float, list[StageReport]]:
    started = time.perf_counter()
    with Workspace(settings) as workspace:
        reports = build_everything(workspace, shards)
    return time.perf_counter() - started, reports


def write_eval_corpus(set_dir: Path, target: Path) -> None:
    """Each passage of an eval set's corpus.jsonl as ``<set>/<id>.md`` under ``target``."""
    folder = target / set_dir.name
    folder.mkdir(parents=True)
    with (set_dir / "corpus.jsonl").open() as lines:
        for line in lines:
            passage = json.loads(line)
            name = "".join(c if c.isalnum() or c in "-_." else "_" for c in passage["id"])
            (folder / f"{name}.md").write_text(f"# {passage.get('title') or passage['id']}\n\n{passage['text']}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default="data/corpus")
    parser.add_argument("--eval-set", type=Path, action="append", default=[],
                        help="an eval-set folder whose corpus.jsonl passages are added as documents")
    parser.add_argument("--share", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-resync-") as scratch:
        corpus = Path(scratch) / "corpus"
        shutil.copytree(args.corpus, corpus)
        for set_dir in args.eval_set:
            write_eval_corpus(set_dir, corpus)
        settings = load_settings(index_dir=str(Path(scratch) / "index"),
                                 sources=[{"name": "c", "kind": "folder", "path": str(corpus)}])
        with Workspace(settings) as warm:  # load the embedding model and spaCy (both cached per process) untimed
            warm.embedder.embed(["warm-up"])
        load_spacy(settings.extraction.spacy_model)

        full_seconds, full_stages = timed_build(settings)
        files = sorted(p for p in corpus.rglob("*.md"))
        edited = random.Random(args.seed).sample(files, max(1, round(len(files) * args.share)))
        for path in edited:
            path.write_text(path.read_text() + EDIT)
        shards = sorted({stable_shard(f"c:{p.relative_to(corpus).as_posix()}", settings.shard_count) for p in edited})
        resync_seconds, resync_stages = timed_build(settings, shards)
        unchanged_seconds, unchanged_stages = timed_build(settings, shards)

    print(f"{len(files)} documents, {len(edited)} edited ({args.share:.0%}), {len(shards)} shard(s) re-synced")
    print(f"{'stage':<22}{'full build s':>14}{'re-sync s':>12}{'unchanged s':>13}  re-sync counts")
    for full, resync, unchanged in zip(full_stages, resync_stages, unchanged_stages):
        print(f"{full.stage:<22}{full.total_seconds:>14.2f}{resync.total_seconds:>12.2f}"
              f"{unchanged.total_seconds:>13.2f}  {compact_counts(resync.counts, limit=8)}")
    print(f"{'total (wall)':<22}{full_seconds:>14.2f}{resync_seconds:>12.2f}{unchanged_seconds:>13.2f}")
    print("re-sync steps over 0.2 s: " + "; ".join(
        f"{r.stage} " + " ".join(f"{step} {s:.1f}" for step, s in r.seconds.items() if s >= 0.2)
        for r in resync_stages if r.total_seconds >= 0.2))
    print(f"with nothing changed, {unchanged_stages[0].stage}: {compact_counts(unchanged_stages[0].counts, limit=8)}")
    print(f"re-sync = {resync_seconds / full_seconds:.1%} of a full build; with nothing changed "
          f"{unchanged_seconds / full_seconds:.1%}")


if __name__ == "__main__":
    main()
