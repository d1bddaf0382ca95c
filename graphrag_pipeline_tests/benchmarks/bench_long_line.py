"""Benchmark of chunking one very long line (not a test: run it by hand).

    python -m graphrag_pipeline_tests.benchmarks.bench_long_line [--megabytes 5] [--tokenizer minilm|words]

Chunks a single line of words (no newline, no sentence end) and a single word without spaces of the given size with
the pipeline's settings (512/64 recursive, MiniLM's tokenizer or the word tokenizer), and prints chunks, seconds and
the process's peak resident memory added by chunking. Issue 16 measured 1.3 GB for a 5 MB line before the text was
tokenized in windows.
"""

from __future__ import annotations

import argparse
import resource
import time

from graphrag_pipeline.lib.algorithms.chunking import Tokenizer, WordTokenizer, chunk_document
from graphrag_pipeline.lib.core.config import EmbedderConfig
from graphrag_pipeline.lib.core.models import Document
from graphrag_pipeline.lib.embed.embedders import bundled_model_path
from graphrag_pipeline.lib.embed.numpy_encoder import NumpyEmbedder


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def load_tokenizer(name: str) -> Tokenizer:
    if name == "words":
        return WordTokenizer()
    return NumpyEmbedder(str(bundled_model_path()), EmbedderConfig())  # the build's tokenizer, as it applies it


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=5)
    parser.add_argument("--tokenizer", choices=("minilm", "words"), default="minilm")
    args = parser.parse_args()
    size = int(args.megabytes * 1_000_000)
    tokenizer = load_tokenizer(args.tokenizer)
    tokenizer.encode_offsets("warm up")
    sentence = "the payments api retries the ledger write after a timeout and logs the request id "
    for label, text in (("line of words", (sentence * (size // len(sentence) + 1))[:size]), ("one word", "A" * size)):
        document = Document("bench:line", "bench", "", "line", text, "h")
        before = peak_rss_mb()
        started = time.perf_counter()
        chunks = chunk_document(document, size=512 - 64, overlap=64, tokenizer=tokenizer)
        elapsed = time.perf_counter() - started
        print(f"{args.megabytes:g} MB {label} ({args.tokenizer}): {len(chunks):,} chunks in {elapsed:.2f} s, "
              f"peak memory +{peak_rss_mb() - before:.0f} MB")


if __name__ == "__main__":
    main()
