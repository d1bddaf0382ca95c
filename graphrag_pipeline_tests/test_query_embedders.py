"""The question embedders of query processes: the offline model evaluated with ONNX Runtime (the default) or NumPy
must be the torch model's function (same vectors, same rankings) without importing torch.

torch is an optional extra (``[torch]``): what the torch runtime computes is kept in ``fixtures/torch_reference.json``
(vectors, token counts, token spans and chunk ids of the texts below), which the runtimes are held to everywhere;
where torch is installed, ``test_the_reference_is_what_the_torch_runtime_computes`` recomputes it and
``GRAPHRAG_WRITE_TORCH_REFERENCE=1`` rewrites it."""

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from graphrag_pipeline.lib.chunking import chunk_document
from graphrag_pipeline.lib.config import EmbedderConfig, load_settings
from graphrag_pipeline.lib.embedders import LocalEmbedder, TorchNotInstalledError, bundled_model_path, configured_embedder
from graphrag_pipeline.lib.numpy_encoder import NumpyEmbedder
from graphrag_pipeline.lib.ids import content_hash
from graphrag_pipeline.lib.models import Document
from graphrag_pipeline.lib.onnx_encoder import OnnxEmbedder
from graphrag_pipeline.query import open_index
from graphrag_pipeline_tests.cli_process import cli_env
from graphrag_pipeline_tests.conftest import FIXTURES, SAMPLE_CORPUS

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


REFERENCE = FIXTURES / "torch_reference.json"
TORCH_INSTALLED = importlib.util.find_spec("sentence_transformers") is not None
needs_torch = pytest.mark.skipif(not TORCH_INSTALLED, reason="the [torch] extra is not installed")


def chunking_texts() -> list[str]:
    return [*TEXTS, *(path.read_text() for path in sorted(SAMPLE_CORPUS.rglob("*.md"))[:40])]


def described(embedder) -> dict:
    """What an embedder computes on the texts above: the reference's shape."""
    texts = chunking_texts()
    documents = [Document(f"t:{i}", "t", "", f"doc {i}", text, content_hash(text)) for i, text in enumerate(texts)]
    return {
        "name": embedder.name, "dimension": embedder.dimension, "max_tokens": embedder.max_tokens,
        "token_counts": [embedder.count_tokens(t) for t in TEXTS],
        "vectors": embedder.embed(TEXTS).round(7).tolist(),
        "offsets_sha256": hashlib.sha256(json.dumps([embedder.encode_offsets(t) for t in texts]).encode()).hexdigest(),
        "chunk_ids": [c.chunk_id for d in documents for c in chunk_document(d, size=120, overlap=16, tokenizer=embedder)],
    }


@pytest.fixture(scope="module")
def reference() -> dict:
    return json.loads(REFERENCE.read_text())


@pytest.fixture(scope="module", params=[NumpyEmbedder, OnnxEmbedder], ids=["numpy", "onnx"])
def runtime(request):
    return request.param(str(bundled_model_path()), EmbedderConfig(batch_size=3))


@needs_torch
def test_the_reference_is_what_the_torch_runtime_computes(reference):
    computed = described(LocalEmbedder())
    if os.environ.get("GRAPHRAG_WRITE_TORCH_REFERENCE") == "1":
        REFERENCE.write_text(json.dumps(computed) + "\n")
        reference = json.loads(REFERENCE.read_text())
    np.testing.assert_allclose(computed.pop("vectors"), reference["vectors"], atol=2e-6)
    assert computed == {key: value for key, value in reference.items() if key != "vectors"}


def test_vectors_equal_the_torch_models_across_padding_truncation_and_unicode(runtime, reference):
    by_runtime = runtime.embed(TEXTS)  # batches of 3 mix lengths, so padding is exercised
    assert by_runtime.dtype == np.float32 and by_runtime.shape == np.array(reference["vectors"]).shape
    np.testing.assert_allclose(by_runtime, reference["vectors"], atol=2e-5)
    np.testing.assert_allclose(runtime.embed(TEXTS[:1])[0], by_runtime[0], atol=1e-6)  # alone = in a batch


@needs_torch
def test_the_torch_embedder_batches_by_token_length_and_answers_in_the_callers_order():
    embedder = LocalEmbedder(EmbedderConfig(batch_size=2))  # batches of 2 out of 7 texts reordered by tokens
    together = embedder.embed(TEXTS)
    alone = np.stack([embedder.embed([text])[0] for text in TEXTS])
    np.testing.assert_allclose(together, alone, atol=2e-5)
    assert embedder.embed([]).shape == (0, embedder.dimension)


def test_it_describes_itself_as_the_torch_embedder_does(runtime, reference):
    assert runtime.name == reference["name"]  # an index built by one is queried by the other
    assert (runtime.dimension, runtime.max_tokens) == (reference["dimension"], reference["max_tokens"])
    assert [runtime.count_tokens(t) for t in TEXTS] == reference["token_counts"]
    assert runtime.embed([]).shape == (0, reference["dimension"])


def test_the_torch_runtime_without_the_extra_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # as if not installed: importing it fails
    embedder = LocalEmbedder(EmbedderConfig(model_path=str(tmp_path)))
    with pytest.raises(TorchNotInstalledError, match=r"pip install 'graphrag_pipeline\[torch\]'"):
        embedder.embed(["payments-api"])


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


def test_the_onnx_runtime_cuts_chunks_at_the_torch_tokenizers_tokens(runtime, reference):
    """The build's chunks are cut on the embedder's token spans: the same spans, so the same chunk ids, whichever
    runtime built an index."""
    computed = described(runtime)
    assert computed["offsets_sha256"] == reference["offsets_sha256"]
    assert computed["chunk_ids"] == reference["chunk_ids"] and len(computed["chunk_ids"]) > len(chunking_texts())


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
    # torch's answers where the extra is installed; else the other runtime's (each is held to torch's vectors above)
    other = "torch" if TORCH_INSTALLED else {"onnx": "numpy", "numpy": "onnx"}[runtime]
    with open_index(settings=sample_settings.with_overrides(embedder={"query_runtime": other})) as index:
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
