"""How each build stage grows with the corpus (not a test: run it by hand).

    python -m graphrag_pipeline_tests.benchmarks.bench_scale --eval-set DIR [--eval-set DIR ...]
                                                             [--sizes 1000,2000,3000]

Pools the passages of the eval sets' `corpus.jsonl` files (interleaved, so every size mixes every set), and for each
size builds the first N of them as Markdown documents from scratch in a process of its own (`graphrag-pipeline
build --json`: the per-process model loads are part of each build, as in a scheduled run). Prints every stage's
seconds per size, its cost per 1,000 documents between consecutive sizes (a stage that grows linearly keeps it
flat), the growth of the whole build against the growth of the corpus, and each build's peak RSS.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from itertools import chain, zip_longest
from pathlib import Path

import yaml


def pooled_passages(set_dirs: list[Path]) -> list[dict]:
    per_set = [[json.loads(line) for line in (d / "corpus.jsonl").read_text().splitlines() if line.strip()]
               for d in set_dirs]
    return [p for p in chain.from_iterable(zip_longest(*per_set)) if p is not None]


def write_corpus(passages: list[dict], folder: Path) -> None:
    folder.mkdir(parents=True)
    for number, passage in enumerate(passages):
        title = passage.get("title") or passage["id"]
        (folder / f"{number:06d}.md").write_text(f"# {title}\n\n{passage['text']}\n")


def build(corpus: Path, index_dir: Path) -> tuple[dict[str, float], float, float]:
    """Stage seconds, wall seconds and peak RSS (MB) of one from-scratch build in a new process."""
    config = index_dir.parent / f"{index_dir.name}.yaml"
    config.write_text(yaml.safe_dump({"index_dir": str(index_dir),
                                      "sources": [{"name": "c", "kind": "folder", "path": str(corpus)}]}))
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.perf_counter()
    completed = subprocess.run([sys.executable, "-m", "graphrag_pipeline.cli", "--config", str(config), "build",
                                "--json"], capture_output=True, text=True, check=True)
    wall = time.perf_counter() - started
    # ru_maxrss of children is the largest child so far: sizes grow, so each build's peak shows once it is the largest
    peak = max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
    return {r["stage"]: r["seconds"] for r in json.loads(completed.stdout)}, wall, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval-set", type=Path, action="append", required=True)
    parser.add_argument("--sizes", default="1000,2000,3000")
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    passages = pooled_passages(args.eval_set)
    if sizes[-1] > len(passages):
        parser.error(f"the eval sets hold {len(passages)} passages, fewer than {sizes[-1]}")
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as scratch:
        for size in sizes:
            corpus = Path(scratch) / f"corpus-{size}"
            write_corpus(passages[:size], corpus)
            results[size] = build(corpus, Path(scratch) / f"index-{size}")
            print(f"built {size} documents in {results[size][1]:.1f} s", file=sys.stderr)
    stages = list(results[sizes[0]][0])
    print(f"{'stage':<22}" + "".join(f"{f'{n} docs s':>13}" for n in sizes)
          + "".join(f"{f's/1k {a}->{b}':>18}" for a, b in zip(sizes, sizes[1:])))
    for stage in [*stages, "wall"]:
        seconds = [results[n][1] if stage == "wall" else results[n][0][stage] for n in sizes]
        slopes = [(s2 - s1) / (n2 - n1) * 1000 for (n1, s1), (n2, s2) in zip(zip(sizes, seconds),
                                                                            zip(sizes[1:], seconds[1:]))]
        print(f"{stage:<22}" + "".join(f"{s:>13.1f}" for s in seconds) + "".join(f"{s:>18.1f}" for s in slopes))
    first, last = sizes[0], sizes[-1]
    print(f"\ncorpus grew {last / first:.2f}x; the build's wall time grew "
          f"{results[last][1] / results[first][1]:.2f}x")
    print("peak RSS per build (MB): " + ", ".join(f"{n} docs {results[n][2]:.0f}" for n in sizes))


if __name__ == "__main__":
    main()
