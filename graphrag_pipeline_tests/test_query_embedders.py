"""The question embedders of query processes: the offline model evaluated with ONNX Runtime (the default) or NumPy
must be the torch model's function (same vectors, same rankings) without importing torch."""

import json
import subprocess
import sys
import threading

import numpy as np
import pytest

from graphrag_pipeline.lib.chunking import chunk_document
from graphrag_pipeline.lib.config import EmbedderConfig, load_settings
from graphrag_pipeline.lib.embedders import LocalEmbedder, bundled_model_path, configured_embedder
from graphrag_pipeline.lib.numpy_encoder import NumpyEmbedder
from graphrag_pipeline.lib.ids import content_hash
from graphrag_pipeline.lib.models import Document
from graphrag_pipeline.lib.onnx_encoder import OnnxEmbedder
from graphrag_pipeline.query import open_index
from graphrag_pipeline_tests.cli_process import cli_env
from graphrag_pipeline_tests.conftest import SAMPLE_CORPUS

TEXTS = [
    "Prometheus cannot send alerts to Alertmanager: which runbook applies?",
    "hi",
    "",
    "Ünïcödé, emoji 🚨 and CJK 监控 in one alert description — with dashes",
    "KubePodCrashLooping kube-state-metrics payments-api checkout_service HTTP 503",
    "The checkout service calls payment, cart and shipping. " * 12,
    "word " * 600,  # beyond the model's window: cut at the same token
]
QUESTIONS = [
    "Prometheus cannot send alerts to Alertmanager: which runbook applies?",
    "Checkout Service is degraded. Which services does it depend on, and where are they documented?",
    "What to do when a pod is crash looping?",
    "Who owns the payment service?",
]


@pytest.fixture(scope="module", params=[NumpyEmbedder, OnnxEmbedder], ids=["numpy", "onnx"])
def both(request):
    return request.param(str(bundled_model_path()), EmbedderConfig(batch_size=3)), LocalEmbedder()


def test_vectors_equal_the_torch_models_across_padding_truncation_and_unicode(both):
    question_embedder, torch_embedder = both
    by_runtime = question_embedder.embed(TEXTS)  # batches of 3 mix lengths, so padding is exercised
    by_torch = torch_embedder.embed(TEXTS)
    assert by_runtime.dtype == np.float32 and by_runtime.shape == by_torch.shape
    np.testing.assert_allclose(by_runtime, by_torch, atol=2e-5)
    np.testing.assert_allclose(question_embedder.embed(TEXTS[:1])[0], by_runtime[0], atol=1e-6)  # alone = in a batch


def test_the_torch_embedder_batches_by_token_length_and_answers_in_the_callers_order():
    embedder = LocalEmbedder(EmbedderConfig(batch_size=2))  # batches of 2 out of 7 texts reordered by tokens
    together = embedder.embed(TEXTS)
    alone = np.stack([embedder.embed([text])[0] for text in TEXTS])
    np.testing.assert_allclose(together, alone, atol=2e-5)
    assert embedder.embed([]).shape == (0, embedder.dimension)


def test_it_describes_itself_as_the_torch_embedder_does(both):
    question_embedder, torch_embedder = both
    assert question_embedder.name == torch_embedder.name  # an index built by one is queried by the other
    assert ((question_embedder.dimension, question_embedder.max_tokens)
            == (torch_embedder.dimension, torch_embedder.max_tokens))
    assert [question_embedder.count_tokens(t) for t in TEXTS] == [torch_embedder.count_tokens(t) for t in TEXTS]
    assert question_embedder.embed([]).shape == (0, torch_embedder.dimension)


def test_builds_and_query_processes_get_onnx_unless_configured_and_other_architectures_get_torch(tmp_path):
    settings = load_settings(index_dir=str(tmp_path / "index"))
    assert type(configured_embedder(settings, query=True)) is OnnxEmbedder
    assert type(configured_embedder(settings, query=False)) is OnnxEmbedder
    assert type(configured_embedder(settings.with_overrides(embedder={"query_runtime": "numpy"}), query=True)) \
        is NumpyEmbedder
    chosen_torch = settings.with_overrides(embedder={"query_runtime": "torch", "runtime": "torch"})
    assert isinstance(configured_embedder(chosen_torch, query=True), LocalEmbedder)
    assert isinstance(configured_embedder(chosen_torch, query=False), LocalEmbedder)
    on_a_gpu = settings.with_overrides(embedder={"device": "cuda"})  # torch's device: nothing is loaded here
    assert isinstance(configured_embedder(on_a_gpu, query=False), LocalEmbedder)
    other = tmp_path / "xlmr"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model_type": "xlm-roberta", "hidden_act": "gelu"}))
    (other / "modules.json").write_text("[]")
    for query in (True, False):
        assert isinstance(configured_embedder(settings.with_overrides(embedder={"model_path": str(other)}),
                                              query=query), LocalEmbedder)


def test_the_onnx_runtime_cuts_chunks_at_the_torch_tokenizers_tokens(both):
    """The build's chunks are cut on the embedder's token spans: the same spans, so the same chunk ids, whichever
    runtime built an index."""
    question_embedder, torch_embedder = both
    texts = [*TEXTS, *(path.read_text() for path in sorted(SAMPLE_CORPUS.rglob("*.md"))[:40])]
    assert [question_embedder.encode_offsets(t) for t in texts] == [torch_embedder.encode_offsets(t) for t in texts]
    documents = [Document(f"t:{i}", "t", "", f"doc {i}", text, content_hash(text)) for i, text in enumerate(texts)]
    chunked = {name: [c.chunk_id for d in documents for c in chunk_document(d, size=120, overlap=16, tokenizer=tok)]
               for name, tok in (("runtime", question_embedder), ("torch", torch_embedder))}
    assert chunked["runtime"] == chunked["torch"] and len(chunked["runtime"]) > len(documents)


_QUERY_PROCESS = """
import json, sys
from graphrag_pipeline.lib.config import PipelineSettings
from graphrag_pipeline.query import open_index
settings = PipelineSettings.model_validate_json(sys.stdin.read())
with open_index(settings=settings) as index:
    answers = [[(r.doc_id, r.combined_score) for r in index.query(q).results] for q in json.loads(sys.argv[1])]
print(json.dumps({"answers": answers, "torch_imported": "torch" in sys.modules,
                  "onnxruntime_imported": "onnxruntime" in sys.modules}))
"""


@pytest.mark.parametrize("runtime", ["onnx", "numpy"])
def test_a_query_process_answers_without_torch_and_ranks_as_the_torch_runtime(sample_settings, tmp_path, runtime):
    settings = sample_settings.with_overrides(embedder={"query_runtime": runtime})
    process = subprocess.run([sys.executable, "-c", _QUERY_PROCESS, json.dumps(QUESTIONS)],
                             input=settings.model_dump_json(), cwd=tmp_path, env=cli_env(),
                             capture_output=True, text=True, timeout=300)
    assert process.returncode == 0, process.stderr
    answered = json.loads(process.stdout)
    assert answered["torch_imported"] is False
    assert answered["onnxruntime_imported"] is (runtime == "onnx")
    with open_index(settings=sample_settings.with_overrides(embedder={"query_runtime": "torch"})) as index:
        by_torch = [[(r.doc_id, r.combined_score) for r in index.query(q).results] for q in QUESTIONS]
    for runtime_answer, torch_answer in zip(answered["answers"], by_torch):
        assert [doc for doc, _ in runtime_answer] == [doc for doc, _ in torch_answer]
        np.testing.assert_allclose([s for _, s in runtime_answer], [s for _, s in torch_answer], atol=1e-4)


def test_open_index_loads_the_question_embedder_beside_the_first_questions_other_work(sample_settings):
    with open_index(settings=sample_settings) as index:
        preparing = [t for t in threading.enumerate() if t.name == "prepare-question-embedder"]
        for thread in preparing:
            thread.join(timeout=120)
        assert type(index.embedder) is OnnxEmbedder
        assert index.embedder._inference_session is not None  # loaded before any question was asked
        assert index.query("What to do when a pod is crash looping?").results


def test_the_onnx_runtime_writes_nothing_outside_the_index(tmp_path):
    """ONNX Runtime's telemetry writes a device id under the home folder (and reports usage) unless it is opted out
    of before its environment starts: the embedder opts out."""
    home = tmp_path / "home"
    home.mkdir()
    environment = {k: v for k, v in cli_env().items() if k != "ORT_DISABLE_TELEMETRY"}
    embed = ("from graphrag_pipeline.lib.config import load_settings\n"
             "from graphrag_pipeline.lib.embedders import configured_embedder\n"
             "print(configured_embedder(load_settings(), query=True).embed(['payments-api']).shape)")
    process = subprocess.run([sys.executable, "-c", embed], cwd=tmp_path, env={**environment, "HOME": str(home)},
                             capture_output=True, text=True, timeout=300)
    assert process.returncode == 0, process.stderr
    assert process.stdout.strip() == "(1, 384)"
    assert [str(p) for p in home.rglob("*")] == []
