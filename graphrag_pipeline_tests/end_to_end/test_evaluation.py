import json
import shutil
from pathlib import Path

import pytest

from graphrag_pipeline.evaluation import (
    eval_settings,
    load_questions,
    recall_at,
    reciprocal_rank,
    source_name_for,
)
from graphrag_pipeline_tests.cli_process import run_cli
from graphrag_pipeline_tests.conftest import FIXTURES

QUESTIONS = [
    {"id": "q1", "question": "Who is the current editor of the Journal of Mathematical Physics?",
     "gold_ids": ["musique-0000"], "type": "1hop"},
    {"id": "q2", "question": "Which psychologist developed person-centered therapy?",
     "gold_ids": ["musique-0001"], "type": "1hop"},
    {"id": "q3", "question": "Which journals were first published or became monthly in 1963?",
     "gold_ids": ["musique-0000", "musique-0002"]},
]
MODE_METRICS = {"recall@2", "recall@5", "recall@10", "all_gold@5", "mrr", "latency_ms_p50", "latency_ms_p95"}


def write_questions(set_dir: Path, lines: list[str]) -> None:
    set_dir.mkdir(parents=True, exist_ok=True)
    (set_dir / "questions.jsonl").write_text("\n".join(lines) + "\n")


# --- metrics ---------------------------------------------------------------------------------------------------------

def test_recall_at_counts_gold_documents_among_the_first_k():
    ranked = ["a", "b", "c", "d"]
    assert recall_at(ranked, ["b", "x"], 1) == 0.0
    assert recall_at(ranked, ["b", "x"], 2) == 0.5
    assert recall_at(ranked, ["b", "d"], 10) == 1.0
    assert recall_at(ranked, ["b", "b"], 2) == 1.0  # a gold id listed twice is one passage
    assert recall_at(ranked, [], 5) == 0.0
    assert recall_at([], ["a"], 5) == 0.0


def test_reciprocal_rank_is_one_over_the_first_gold_position():
    assert reciprocal_rank(["a", "b", "c"], ["c", "b"]) == 0.5
    assert reciprocal_rank(["a", "b", "c"], ["a"]) == 1.0
    assert reciprocal_rank(["a", "b", "c"], ["z"]) == 0.0
    assert reciprocal_rank([], ["a"]) == 0.0


def test_source_name_is_the_folder_name_made_safe(tmp_path):
    assert source_name_for(tmp_path / "musique-100") == "musique-100"
    assert source_name_for(tmp_path / "my set (v2)") == "my-set-v2"
    assert source_name_for(tmp_path / "!!!") == "eval"


# --- questions -------------------------------------------------------------------------------------------------------

def test_load_questions_prefixes_gold_ids_with_the_source_and_skips_blank_lines(tmp_path):
    write_questions(tmp_path, [json.dumps(QUESTIONS[0]), "", json.dumps(QUESTIONS[2])])
    questions = load_questions(tmp_path, "tiny")
    assert [q.question_id for q in questions] == ["q1", "q3"]
    assert questions[0].gold_doc_ids == ("tiny:musique-0000",)
    assert questions[1].gold_doc_ids == ("tiny:musique-0000", "tiny:musique-0002")
    assert [q.type for q in questions] == ["1hop", "untyped"]


@pytest.mark.parametrize("bad_line", [
    '{"id": "q9", "question": "cut off',  # not JSON
    '{"id": "q9", "question": "no gold ids"}',  # a missing key
    '["q9", "a list, not an object"]',
    '"just a string"',
    '{"id": "q9", "question": "gold is a string", "gold_ids": "musique-0001"}',
    '{"id": "q9", "question": "no gold at all", "gold_ids": []}',
])
def test_load_questions_names_the_malformed_line(tmp_path, bad_line):
    write_questions(tmp_path, [json.dumps(QUESTIONS[0]), bad_line])
    with pytest.raises(ValueError, match=r"questions\.jsonl:2: not a question record"):
        load_questions(tmp_path, "tiny")


def test_load_questions_refuses_a_missing_or_empty_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="questions.jsonl is missing"):
        load_questions(tmp_path, "tiny")
    write_questions(tmp_path, [""])
    with pytest.raises(ValueError, match="holds no questions"):
        load_questions(tmp_path, "tiny")


def test_eval_settings_point_one_eval_set_source_at_the_folder(tmp_path):
    shutil.copytree(FIXTURES / "eval_set", tmp_path / "tiny-set")
    settings = eval_settings(tmp_path / "tiny-set", tmp_path / "index", use_extraction=True)
    assert settings.index_dir == str(tmp_path / "index")
    assert [(s.name, s.kind, s.path) for s in settings.sources] == [
        ("tiny-set", "eval_set", str((tmp_path / "tiny-set").resolve()))]
    assert settings.extraction.extractor == "precomputed"
    assert eval_settings(tmp_path / "tiny-set", tmp_path / "index", use_extraction=False
                         ).extraction.extractor == "offline"
    (tmp_path / "tiny-set" / "extraction.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match="--use-extraction"):
        eval_settings(tmp_path / "tiny-set", tmp_path / "index", use_extraction=True)


# --- the eval command ------------------------------------------------------------------------------------------------

@pytest.fixture
def tiny_set(tmp_path) -> Path:
    set_dir = tmp_path / "tiny-set"
    shutil.copytree(FIXTURES / "eval_set", set_dir)
    write_questions(set_dir, [json.dumps(q) for q in QUESTIONS])
    return set_dir


def check_report(report: dict) -> None:
    assert report["set"] == "tiny-set" and report["questions"] == len(QUESTIONS)
    # Three good passages; the deliberately broken corpus line is quarantined, not dropped silently.
    assert report["index"]["documents"] == 3 and report["index"]["quarantined"] >= 1
    assert set(report["modes"]) == {"vector", "keyword", "graph", "hybrid"}
    for mode, metrics in report["modes"].items():
        assert MODE_METRICS <= set(metrics), mode
        assert all(0.0 <= metrics[name] <= 1.0 for name in MODE_METRICS if "latency" not in name)
        assert metrics["recall@2"] <= metrics["recall@5"] <= metrics["recall@10"]
    # Three passages fit in any top five: a gold id that did not map onto a passage would show up here.
    assert report["modes"]["vector"]["recall@5"] == 1.0
    assert report["modes"]["vector"]["all_gold@5"] == 1.0
    assert set(report["by_type"]) == {"1hop", "untyped"}
    assert report["by_type"]["1hop"]["vector"]["questions"] == 2
    for name in ("entity_recall", "hop_coverage", "vector_fallback_rate"):
        assert 0.0 <= report[name] <= 1.0, name


@pytest.mark.slow
def test_eval_with_the_offline_extractor(tiny_set, tmp_path):
    completed = run_cli("eval", str(tiny_set), "--json", cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)
    check_report(report)
    assert report["use_extraction"] is False


@pytest.mark.slow
def test_eval_with_the_shared_extraction_keeps_the_index_in_the_work_dir(tiny_set, tmp_path):
    work_dir = tmp_path / "work"
    completed = run_cli("eval", str(tiny_set), "--use-extraction", "--work-dir", str(work_dir), "--json",
                        cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)
    check_report(report)
    assert report["use_extraction"] is True and report["index"]["entities"] > 0
    assert (work_dir / "state.sqlite").is_file()


def test_eval_of_a_folder_without_a_corpus_exits_2(tmp_path):
    write_questions(tmp_path / "no-corpus", [json.dumps(QUESTIONS[0])])
    completed = run_cli("eval", str(tmp_path / "no-corpus"), "--json", cwd=tmp_path)
    assert completed.returncode == 2
    assert completed.stdout == ""
    assert "corpus.jsonl is missing: not an eval-set folder" in completed.stderr
