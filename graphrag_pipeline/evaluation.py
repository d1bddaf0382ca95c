"""Retrieval evaluation on an eval-set folder (`corpus.jsonl`, `questions.jsonl`, optional `extraction.jsonl`).

Builds an index of the set with the same stages the Dagster assets run, then scores every mode:
recall@k (share of a question's gold passages among the first k distinct documents), all-gold@5, MRR, per
question type, plus how far the graph reaches: entity_recall (share of gold passages mentioning an entity the
traversal reached), hop_coverage (share of gold passages in the fused candidate pool: vector entry points ∪
graph-reached chunks) and vector_fallback_rate (share of questions where no entity could be linked).
"""

from __future__ import annotations

import json
import re
import statistics
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from graphrag_pipeline.lib.compose.workspace import Workspace
from graphrag_pipeline.lib.core.config import PipelineSettings, load_settings
from graphrag_pipeline.lib.core.ids import normalize_name
from graphrag_pipeline.lib.core.progress import ProgressListener
from graphrag_pipeline.lib.sources.paths import check_inside
from graphrag_pipeline.lib.stages import build_everything

EVAL_MODES = ("vector", "keyword", "graph", "hybrid")
RECALL_AT = (2, 5, 10)


@dataclass(frozen=True)
class Question:
    question_id: str
    question: str
    gold_doc_ids: tuple[str, ...]
    type: str
    # The answer as facts, (source, type, target) by entity name, and the entities it names: scored against the
    # facts the question's intents followed and against ``context()`` (see ``score_facts``).
    gold_facts: tuple[tuple[str, str, str], ...] = ()
    gold_entities: tuple[str, ...] = ()


def source_name_for(set_dir: Path) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", set_dir.resolve().name).strip("-") or "eval"


def load_questions(set_dir: Path, source_name: str) -> list[Question]:
    path = set_dir / "questions.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: an eval set needs corpus.jsonl and questions.jsonl")
    questions = []
    for line_no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            gold = record["gold_ids"]
            facts = record.get("gold_facts") or []
            if not isinstance(facts, list) or not all(
                    isinstance(f, list) and len(f) == 3 and all(isinstance(p, str) for p in f) for f in facts):
                raise TypeError("gold_facts must be a list of [source, type, target] name triples")
            if not isinstance(gold, list) or not (gold or facts) or not all(isinstance(g, (str, int)) for g in gold):
                raise TypeError("gold_ids must be a list of passage ids, non-empty unless gold_facts are given")
            entities = record.get("gold_entities") or []
            if not isinstance(entities, list) or not all(isinstance(e, str) for e in entities):
                raise TypeError("gold_entities must be a list of entity names")
            questions.append(Question(
                question_id=str(record["id"]),
                question=str(record["question"]),
                gold_doc_ids=tuple(f"{source_name}:{g}" for g in gold),
                type=str(record.get("type") or "untyped"),
                gold_facts=tuple(tuple(f) for f in facts),
                gold_entities=tuple(entities),
            ))
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{path}:{line_no}: not a question record ({error})") from error
    if not questions:
        raise ValueError(f"{path} holds no questions")
    return questions


def eval_settings(set_dir: Path, index_dir: Path, use_extraction: bool, base: PipelineSettings | None = None,
                  ) -> PipelineSettings:
    base = base or load_settings()
    if use_extraction and not (set_dir / "extraction.jsonl").is_file():
        raise FileNotFoundError(f"--use-extraction: {set_dir / 'extraction.jsonl'} does not exist")
    sources = [{"name": source_name_for(set_dir), "kind": "eval_set", "path": str(set_dir.resolve())}]
    if (set_dir / "catalog").is_dir():  # a service catalog or Backstage entities that come with the set's passages
        if refused := check_inside(set_dir, set_dir / "catalog", follow_symlinks=False):
            raise ValueError(f"eval set {set_dir}: {refused.reason}")  # sources never leave their folder
        sources.append({"name": f"{source_name_for(set_dir)}-catalog", "kind": "catalog",
                        "path": str((set_dir / "catalog").resolve())})
    return base.with_overrides(
        index_dir=str(index_dir),
        sources=sources,
        extraction={"extractor": "precomputed" if use_extraction else "offline"},
    )


def recall_at(ranked: Sequence[str], gold: Iterable[str], k: int) -> float:
    gold_set = set(gold)
    return len(gold_set & set(ranked[:k])) / len(gold_set) if gold_set else 0.0


def reciprocal_rank(ranked: Sequence[str], gold: Iterable[str]) -> float:
    gold_set = set(gold)
    for position, doc_id in enumerate(ranked, start=1):
        if doc_id in gold_set:
            return 1.0 / position
    return 0.0


def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def evaluate(
    set_dir: str | Path,
    *,
    work_dir: str | Path | None = None,
    use_extraction: bool = False,
    modes: Sequence[str] = EVAL_MODES,
    base_settings: PipelineSettings | None = None,
    progress_listeners: Sequence[ProgressListener] = (),
) -> dict[str, Any]:
    """Build the set's index and score every mode; `progress_listeners` watch the build's long steps."""
    set_dir = Path(set_dir)
    if not (set_dir / "corpus.jsonl").is_file():
        raise FileNotFoundError(f"{set_dir / 'corpus.jsonl'} is missing: not an eval-set folder")
    source_name = source_name_for(set_dir)
    questions = load_questions(set_dir, source_name)
    with tempfile.TemporaryDirectory(prefix="graphrag-eval-") as scratch:
        index_dir = Path(work_dir) if work_dir else Path(scratch) / "index"
        settings = eval_settings(set_dir, index_dir, use_extraction, base_settings)
        workspace = Workspace(settings, progress_listeners=progress_listeners)
        started = time.perf_counter()
        reports = build_everything(workspace)
        build_seconds = time.perf_counter() - started
        graph_report = next(report for report in reports if report.stage == "graph")
        index_info = {
            "documents": workspace.state.document_count(),
            "chunks": workspace.state.chunk_count(),
            "entities": graph_report.counts.get("entities", 0),
            "relationships": graph_report.counts.get("relationships", 0),
            "quarantined": len(workspace.state.quarantined()),
            "build_seconds": round(build_seconds, 1),
            "stage_seconds": {r.stage: r.total_seconds for r in reports},
        }
        workspace.close()
        from graphrag_pipeline.query import open_index

        with open_index(settings=settings) as engine:
            engine.embedder.embed(["warm-up"])  # the one-time model load is not query latency
            result = score_questions(engine, questions, modes)
    return {"set": source_name, "questions": len(questions), "use_extraction": use_extraction,
            "index": index_info, **result}


def score_questions(engine, questions: Sequence[Question], modes: Sequence[str]) -> dict[str, Any]:
    doc_of_chunk: dict[str, str] = dict(engine.state.query("SELECT chunk_id, doc_id FROM chunks"))
    per_mode: dict[str, dict[str, list[float]]] = {m: defaultdict(list) for m in modes}
    per_type: dict[str, dict[str, dict[str, list[float]]]] = defaultdict(lambda: {m: defaultdict(list) for m in modes})
    reach = defaultdict(list)
    for question in questions:
        for mode in modes if question.gold_doc_ids else ():
            started = time.perf_counter()
            retrieval = engine.retrieve(question.question, mode=mode)
            latency = (time.perf_counter() - started) * 1000
            ranked_chunks = sorted(retrieval.combined, key=lambda c: (-retrieval.combined[c], c))
            ranked_docs = list(dict.fromkeys(doc_of_chunk[c] for c in ranked_chunks if c in doc_of_chunk))
            scores = {f"recall@{k}": recall_at(ranked_docs, question.gold_doc_ids, k) for k in RECALL_AT}
            scores["all_gold@5"] = float(set(question.gold_doc_ids) <= set(ranked_docs[:5]))
            scores["mrr"] = reciprocal_rank(ranked_docs, question.gold_doc_ids)
            for name, value in scores.items():
                per_mode[mode][name].append(value)
                per_type[question.type][mode][name].append(value)
            per_mode[mode]["latency_ms"].append(latency)
            if mode == "hybrid":
                _record_reach(engine, retrieval, question, doc_of_chunk, reach)
    summary = {
        mode: {
            **{name: round(statistics.fmean(values), 4) for name, values in metrics.items() if name != "latency_ms"},
            "latency_ms_p50": round(_percentile(metrics["latency_ms"], 0.5), 2),
            "latency_ms_p95": round(_percentile(metrics["latency_ms"], 0.95), 2),
        }
        for mode, metrics in per_mode.items()
    }
    by_type = {
        qtype: {
            mode: {**{name: round(statistics.fmean(v), 4) for name, v in metrics.items()},
                   "questions": len(metrics["mrr"])}
            for mode, metrics in by_mode.items()
        }
        for qtype, by_mode in sorted(per_type.items())
    }
    return {
        "modes": summary,
        "by_type": by_type,
        "facts": score_facts(engine, [q for q in questions if q.gold_facts]),
        "entity_recall": round(statistics.fmean(reach["entity"]), 4) if reach["entity"] else None,
        "hop_coverage": round(statistics.fmean(reach["pool"]), 4) if reach["pool"] else None,
        "vector_fallback_rate": round(statistics.fmean(reach["fallback"]), 4) if reach["fallback"] else None,
    }


def fact_scores(found: set[tuple[str, str, str]], gold: set[tuple[str, str, str]]) -> tuple[float, float]:
    """(recall, precision) of ``found`` against ``gold``; precision over the found facts of the types the gold
    answer has (a context also lists what the question did not ask for: owners, runbooks, the other direction)."""
    asked = {fact for fact in found if fact[1] in {g[1] for g in gold}}
    hits = len(asked & gold)
    return hits / len(gold) if gold else 0.0, hits / len(asked) if asked else 0.0


def score_facts(engine, questions: Sequence[Question]) -> dict[str, Any]:
    """Per question type: recall and precision of ``context()``'s facts and of the facts the hybrid query's intents
    followed, against ``gold_facts``; and the share of ``gold_entities`` among the context's services."""
    def key(source: str, relationship_type: str, target: str) -> tuple[str, str, str]:
        return normalize_name(source), relationship_type, normalize_name(target)

    per_type: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for question in questions:
        gold = {key(*fact) for fact in question.gold_facts}
        context = engine.context(question.question)
        found = {key(f.source, f.type, f.target) for f in context.facts}
        scores = per_type[question.type]
        recall, precision = fact_scores(found, gold)
        scores["context_fact_recall"].append(recall)
        scores["context_fact_precision"].append(precision)
        followed = engine.retrieve(question.question, mode="hybrid").followed
        names = {eid: e.name for eid, e in engine.graph.get_entities(
            {r.source_id for r in followed} | {r.target_id for r in followed}).items()}
        found = {key(names[r.source_id], r.type, names[r.target_id]) for r in followed
                 if r.source_id in names and r.target_id in names}
        recall, precision = fact_scores(found, gold)
        scores["followed_fact_recall"].append(recall)
        scores["followed_fact_precision"].append(precision)
        if question.gold_entities:
            services = {normalize_name(s.name) for s in context.services()}
            wanted = {normalize_name(name) for name in question.gold_entities}
            scores["context_entity_recall"].append(len(services & wanted) / len(wanted))
    return {qtype: {**{name: round(statistics.fmean(values), 4) for name, values in metrics.items()},
                    "questions": len(metrics["context_fact_recall"])}
            for qtype, metrics in sorted(per_type.items())}


def _record_reach(engine, retrieval, question: Question, doc_of_chunk: dict[str, str], reach: dict) -> None:
    reach["fallback"].append(float(retrieval.fell_back_to_vector))
    reached_entities = set(retrieval.reached)
    pool_docs = {doc_of_chunk.get(c) for c in retrieval.combined}
    gold_chunks = [c for c, d in doc_of_chunk.items() if d in set(question.gold_doc_ids)]
    entities_of = engine.graph.entities_of_chunks(gold_chunks)
    for gold in question.gold_doc_ids:
        gold_entities = {e for c in gold_chunks if doc_of_chunk[c] == gold for e in entities_of.get(c, ())}
        reach["entity"].append(float(bool(gold_entities & reached_entities)))
        reach["pool"].append(float(gold in pool_docs))


def format_table(report: dict[str, Any]) -> str:
    """The eval report as a Markdown table (modes × metrics), then per-type recall@5."""
    columns = [f"recall@{k}" for k in RECALL_AT] + ["all_gold@5", "mrr", "latency_ms_p50", "latency_ms_p95"]
    lines = [f"### {report['set']} ({report['questions']} questions, "
             f"{'shared extraction' if report['use_extraction'] else 'offline extractor'})",
             "", "| mode | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for mode, metrics in report["modes"].items():
        lines.append(f"| {mode} | " + " | ".join(f"{metrics.get(c, 0):.3f}" if "latency" not in c
                                                 else f"{metrics.get(c, 0):.1f}" for c in columns) + " |")
    lines += ["", "| type | " + " | ".join(f"{m} recall@5" for m in report["modes"]) + " | questions |",
              "|---|" + "---|" * (len(report["modes"]) + 1)]
    for qtype, by_mode in report["by_type"].items():
        count = next(iter(by_mode.values()))["questions"]
        lines.append(f"| {qtype} | " + " | ".join(f"{by_mode[m]['recall@5']:.3f}" for m in report["modes"])
                     + f" | {count} |")
    if report.get("facts"):
        columns = ["context_fact_recall", "context_fact_precision", "followed_fact_recall", "followed_fact_precision"]
        lines += ["", "| type | " + " | ".join(columns) + " | questions |", "|---|" + "---|" * (len(columns) + 1)]
        for qtype, metrics in report["facts"].items():
            lines.append(f"| {qtype} | " + " | ".join(f"{metrics[c]:.3f}" for c in columns)
                         + f" | {metrics['questions']} |")
    lines += ["", f"entity_recall {report['entity_recall']} · hop_coverage {report['hop_coverage']} · "
                  f"vector_fallback_rate {report['vector_fallback_rate']} · index {report['index']}"]
    return "\n".join(lines)
