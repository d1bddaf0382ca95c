"""A sentence-transformers BERT model (mean pooling, unit norm) evaluated with NumPy: a question embedder of a query
process, which then never imports torch (``embedder.query_runtime: numpy``; the default runtime, ONNX Runtime in
``onnx_encoder``, builds its graph from the weights read here).

Importing torch and sentence-transformers costs seconds, more than a whole query: a process that embeds one
question at a time needs neither. This reads the same `model.safetensors` and `tokenizer.json` the build's model
loads and computes the same function (BERT encoder, exact-erf GELU, mean pooling over real tokens, L2 norm), so its
vectors agree with the torch model's to float32 rounding — the tests pin that, and that rankings are unchanged.
Batches of many long texts are for ONNX Runtime (``onnx_encoder``) or torch: NumPy is no build's embedder.
"""

from __future__ import annotations

import json
import threading
from functools import cache, cached_property
from pathlib import Path
from typing import Sequence

import numpy as np

from graphrag_pipeline.lib.core.config import EmbedderConfig
from graphrag_pipeline.lib.core.errors import GraphRAGError

_BERT_WEIGHTS: dict[str, "BertWeights"] = {}
_BERT_WEIGHTS_LOCK = threading.Lock()


class UnsupportedModel(GraphRAGError, ValueError):
    """The model directory holds something other than a mean-pooled, normalized BERT sentence encoder."""

    kind = "invalid"


def is_mean_pooled_bert(model_dir: Path) -> bool:
    """Whether ``model_dir`` holds what this module evaluates: a BERT encoder in safetensors with exact GELU and
    absolute positions, mean pooling and normalization (all-MiniLM-L6-v2 and models laid out like it)."""
    try:
        config = json.loads((model_dir / "config.json").read_text())
        modules = json.loads((model_dir / "modules.json").read_text())
        pooling_dirs = [m["path"] for m in modules if m["type"].endswith("models.Pooling")]
        pooling = json.loads((model_dir / pooling_dirs[0] / "config.json").read_text()) if pooling_dirs else {}
    except (OSError, ValueError, KeyError):
        return False
    return (config.get("model_type") == "bert" and config.get("hidden_act") == "gelu"
            and config.get("position_embedding_type", "absolute") == "absolute"
            and bool(pooling.get("pooling_mode_mean_tokens"))
            and any(m["type"].endswith("models.Normalize") for m in modules)
            and (model_dir / "model.safetensors").is_file() and (model_dir / "tokenizer.json").is_file())


class BertWeights:
    def __init__(self, model_dir: Path):
        from safetensors.numpy import load_file

        if not is_mean_pooled_bert(model_dir):
            raise UnsupportedModel(f"{model_dir} is not a mean-pooled, normalized BERT model in safetensors")
        config = json.loads((model_dir / "config.json").read_text())
        self.heads = int(config["num_attention_heads"])
        self.layers = int(config["num_hidden_layers"])
        self.eps = float(config["layer_norm_eps"])
        self.max_length = int(json.loads((model_dir / "sentence_bert_config.json").read_text())["max_seq_length"])
        # Dense weights stored (in, out) and contiguous: ``x @ w`` then runs as one BLAS call, where a transposed
        # view of torch's (out, in) layout took a slow path, an order of magnitude slower per projection.
        self.tensors = {
            name: np.ascontiguousarray(tensor.T) if name.endswith("dense.weight") or ".self." in name and
            name.endswith(".weight") else tensor
            for name, tensor in ((k.removeprefix("bert."), v)
                                 for k, v in load_file(str(model_dir / "model.safetensors")).items())
        }

    def __getitem__(self, name: str) -> np.ndarray:
        return self.tensors[name]


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + eps) * weight + bias


def _gelu(x: np.ndarray) -> np.ndarray:
    from scipy.special import erf

    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


def _softmax(x: np.ndarray) -> np.ndarray:
    x = np.exp(x - x.max(-1, keepdims=True))
    return x / x.sum(-1, keepdims=True)


def token_embeddings(weights: BertWeights, ids: np.ndarray) -> np.ndarray:
    """The encoder's input for token ids ``ids`` (batch, length): word, position and (single) token type embeddings
    summed, float32."""
    return (weights["embeddings.word_embeddings.weight"][ids]
            + weights["embeddings.position_embeddings.weight"][: ids.shape[1]]
            + weights["embeddings.token_type_embeddings.weight"][0])


def encode(weights: BertWeights, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Unit-norm sentence vectors for token ids ``ids`` (batch, length) with attention ``mask`` (1 for real tokens)."""
    w = weights
    batch, length = ids.shape
    x = _layer_norm(token_embeddings(w, ids), w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], w.eps)
    hidden = x.shape[-1]
    head = hidden // w.heads
    # Padding gets the most negative float as its score, as in transformers: it weighs nothing after the softmax.
    padding = np.where(mask[:, None, None, :] > 0, 0.0, np.finfo(np.float32).min).astype(np.float32)
    for layer in range(w.layers):
        p = f"encoder.layer.{layer}."

        def dense(inputs: np.ndarray, name: str) -> np.ndarray:
            flat = inputs.reshape(-1, inputs.shape[-1]) @ w[f"{p}{name}.weight"] + w[f"{p}{name}.bias"]
            return flat.reshape(*inputs.shape[:-1], -1)

        def heads(t: np.ndarray) -> np.ndarray:
            return t.reshape(batch, length, w.heads, head).transpose(0, 2, 1, 3)

        q, k, v = (heads(dense(x, f"attention.self.{n}")) for n in ("query", "key", "value"))
        attention = _softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(head) + padding)
        context = (attention @ v).transpose(0, 2, 1, 3).reshape(batch, length, hidden)
        x = _layer_norm(dense(context, "attention.output.dense") + x,
                        w[f"{p}attention.output.LayerNorm.weight"], w[f"{p}attention.output.LayerNorm.bias"], w.eps)
        inner = _gelu(dense(x, "intermediate.dense"))
        x = _layer_norm(dense(inner, "output.dense") + x,
                        w[f"{p}output.LayerNorm.weight"], w[f"{p}output.LayerNorm.bias"], w.eps)
    weights_of_tokens = mask[:, :, None].astype(np.float32)
    pooled = (x * weights_of_tokens).sum(1) / np.maximum(weights_of_tokens.sum(1), 1e-9)
    return (pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)).astype(np.float32)


@cache
def _blas_threads():
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def length_batches(lengths: Sequence[int], batch_size: int, batch_tokens: int) -> list[list[int]]:
    """The indexes of texts of ``lengths`` tokens in batches for the model: shortest first, so a batch pads little,
    each at most ``batch_size`` texts and, past its first text, ``batch_tokens`` tokens once padded to its longest.
    The model's cost grows faster than its tokens with a batch's size (its attention, and what falls out of cache)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    for i in order:
        if batches and len(batches[-1]) < batch_size and (len(batches[-1]) + 1) * lengths[i] <= batch_tokens:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


class NumpyEmbedder:
    """`Embedder` over a local sentence-transformers BERT model, evaluated with NumPy (no torch import). Its name is
    the torch embedder's: both compute the same vectors, so an index built by one is queried by the other.

    ``threads``: BLAS threads (None: BLAS's default). A question is a tiny input: more threads only wait on each
    other, and on a busy machine a second one made a question 30 ms instead of 18 ms here (query_threads)."""

    def __init__(self, model_path: str, config: EmbedderConfig, *, threads: int | None = None):
        self._model_dir = Path(model_path)
        self._config = config
        self._lock = threading.Lock()
        self._threads = threads

    @property
    def name(self) -> str:
        return f"local/{self._model_dir.name if self._config.model_path else 'all-MiniLM-L6-v2'}"

    @cached_property
    def _weights(self) -> BertWeights:
        key = str(self._model_dir)
        with _BERT_WEIGHTS_LOCK:
            if key not in _BERT_WEIGHTS:
                _BERT_WEIGHTS[key] = BertWeights(self._model_dir)
            return _BERT_WEIGHTS[key]

    def _load_tokenizer(self):
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(self._model_dir / "tokenizer.json"))
        tokenizer.no_padding()
        return tokenizer

    @cached_property
    def _tokenizer(self):
        """Cuts inputs at the model's window, as the model's own tokenizer does when it embeds."""
        tokenizer = self._load_tokenizer()
        tokenizer.enable_truncation(self._weights.max_length)
        return tokenizer

    @cached_property
    def _counting_tokenizer(self):
        """Counts a whole text, as chunkers need."""
        tokenizer = self._load_tokenizer()
        tokenizer.no_truncation()
        return tokenizer

    def prepare(self) -> None:
        """Load what the first embedding needs, so that a query process can do it beside the rest of its first
        question's work (``query.open_index`` calls this in a thread of its own)."""
        self._tokenizer  # noqa: B018 (loads the weights too, for the model's window)

    @property
    def dimension(self) -> int:
        return int(self._weights["embeddings.word_embeddings.weight"].shape[1])

    @property
    def max_tokens(self) -> int:
        return self._weights.max_length - 2  # [CLS] and [SEP]

    def count_tokens(self, text: str) -> int:
        return len(self._counting_tokenizer.encode(text, add_special_tokens=False).ids)

    def encode_offsets(self, text: str) -> list[tuple[int, int]]:
        """Character spans of the model's tokens, for chunkers that cut on token boundaries (the same spans as the
        torch embedder's tokenizer: both read ``tokenizer.json``)."""
        from graphrag_pipeline.lib.algorithms.chunking import token_spans

        return token_spans(self._counting_tokenizer.encode(text, add_special_tokens=False).offsets)

    def encode_offsets_batch(self, texts: Sequence[str]) -> list[list[tuple[int, int]]]:
        """``encode_offsets`` of each text, the texts spread over the cores (the chunks stage's batch of documents)."""
        from graphrag_pipeline.lib.algorithms.chunking import token_spans

        return [token_spans(encoding.offsets)
                for encoding in self._counting_tokenizer.encode_batch(list(texts), add_special_tokens=False)]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        with self._lock:
            encodings = self._tokenizer.encode_batch(list(texts))
        vectors = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for members in length_batches([len(e.ids) for e in encodings], self._config.batch_size,
                                      self._config.batch_tokens):
            length = len(encodings[members[-1]].ids)
            ids = np.zeros((len(members), length), dtype=np.int64)
            mask = np.zeros((len(members), length), dtype=np.int64)
            for row, i in enumerate(members):
                tokens = encodings[i].ids
                ids[row, : len(tokens)] = tokens
                mask[row, : len(tokens)] = 1
            vectors[members] = self._encode(ids, mask)
        return vectors

    def _encode(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        if self._threads is None:
            return encode(self._weights, ids, mask)
        with _blas_threads().limit(limits=self._threads, user_api="blas"):
            return encode(self._weights, ids, mask)
