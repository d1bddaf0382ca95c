"""Load test of `graphrag-pipeline serve` (not a test: run it by hand), loopback only and bounded in time.

    python -m graphrag_pipeline_tests.benchmarks.bench_http_load --url http://127.0.0.1:8765 --key-env GRAPHRAG_KEY \
        [--clients 8] [--seconds 60] [--questions FILE]

N clients, each asking one question after another (the sample corpus's kinds of questions by default, or one per
line of FILE) for the given seconds, then it prints requests/s, latency p50/p95/p99 and every status other than 200
with its count. It refuses any host but the loopback: a load test is aimed at a server of one's own.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import statistics
import threading
import time
from collections import Counter
from urllib.parse import urlparse

import httpx

QUESTIONS = (
    "Prometheus cannot send alerts to Alertmanager: which runbook applies?",
    "Checkout Service is degraded. Which services does it depend on, and where are they documented?",
    "What to do when a pod is crash looping?",
    "Which runbook covers etcd having no leader?",
    "Who owns the payment service?",
    "KubeJobFailed is firing: what should I check?",
)
MAX_SECONDS = 600


def loopback_only(url: str) -> None:
    host = urlparse(url).hostname or ""
    addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    if not addresses or not all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses):
        raise SystemExit(f"refusing {url}: the load test only targets a server on this machine's loopback")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8765")
    parser.add_argument("--key-env", default="GRAPHRAG_KEY", help="environment variable holding the API key")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--questions", help="a file with one question per line")
    parser.add_argument("--mode", default="hybrid")
    args = parser.parse_args()
    loopback_only(args.url)
    if not 1 <= args.clients <= 256 or not 0 < args.seconds <= MAX_SECONDS:
        raise SystemExit(f"--clients 1..256 and --seconds up to {MAX_SECONDS}")
    key = os.environ.get(args.key_env)
    if not key:
        raise SystemExit(f"${args.key_env} holds no API key")
    questions = QUESTIONS
    if args.questions:
        with open(args.questions, encoding="utf-8") as handle:
            questions = tuple(line.strip() for line in handle if line.strip())

    latencies: list[float] = []
    statuses: Counter[str] = Counter()
    lock = threading.Lock()
    stop_at = time.monotonic() + args.seconds

    def client(number: int) -> None:
        with httpx.Client(base_url=args.url, timeout=60, headers={"Authorization": f"Bearer {key}"}) as http:
            asked = number
            while time.monotonic() < stop_at:
                question = questions[asked % len(questions)]
                asked += 1
                started = time.perf_counter()
                try:
                    status = str(http.post("/v1/search", json={"question": question, "mode": args.mode}).status_code)
                except httpx.HTTPError as error:
                    status = type(error).__name__
                elapsed = (time.perf_counter() - started) * 1000
                with lock:
                    statuses[status] += 1
                    if status == "200":
                        latencies.append(elapsed)

    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(n,)) for n in range(args.clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.monotonic() - started
    total = sum(statuses.values())
    print(f"{args.clients} clients, {wall:.1f} s, mode {args.mode}: {total} requests, {total / wall:.1f} requests/s")
    if latencies:
        cuts = statistics.quantiles(latencies, n=100)
        print(f"latency of answered requests, ms: p50 {cuts[49]:.0f} · p95 {cuts[94]:.0f} · p99 {cuts[98]:.0f} · "
              f"max {max(latencies):.0f}")
    errors = {status: count for status, count in statuses.items() if status != "200"}
    print(f"errors: {sum(errors.values())}" + (f" ({', '.join(f'{s}: {c}' for s, c in sorted(errors.items()))})"
                                               if errors else ""))


if __name__ == "__main__":
    main()
