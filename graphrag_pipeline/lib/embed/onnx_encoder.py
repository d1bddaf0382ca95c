"""The offline model on ONNX Runtime: the NumPy encoder's function as an ONNX graph, built in memory from the same
weights when the first text is embedded; the embedder of builds and of query processes by default.

NumPy evaluates a question's 36 dense products one BLAS call at a time, and for a 15-token question each call is
mostly overhead: a question took 30-46 ms. ONNX Runtime runs the same products as one fused graph in 7-10 ms,
with the same vectors to float32 rounding (the tests pin them to the torch model's). The graph is written here from
``model.safetensors`` rather than exported by torch, so a query process still never imports torch, and nothing is
written to disk or fetched: every process builds it from the weights it already has (a fifth of a second).
The token lookup stays in NumPy, so the graph holds only the encoder's weights.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np

from graphrag_pipeline.lib.core.config import EmbedderConfig
from graphrag_pipeline.lib.embed.numpy_encoder import BertWeights, NumpyEmbedder, token_embeddings

# LayerNormalization is an operator from opset 17 on.
_OPSET = 17


def bert_graph(weights: BertWeights) -> tuple[Any, dict[str, np.ndarray]]:
    """An ONNX model computing ``numpy_encoder.encode`` from the summed token, position and type embeddings:
    inputs ``embedded`` (batch, length, hidden) float32 and ``mask`` (batch, length) float32, output ``vectors``;
    and the model's weights by name. The model declares them as external data and the session is handed the arrays
    themselves (``add_external_initializers``): copying 43 MB of weights into the model and serializing it took
    0.3 s of a cold query, and the model without them is 27 kB."""
    from onnx import TensorProto, helper, numpy_helper

    nodes, initializers = [], []
    external: dict[str, np.ndarray] = {}

    def constant(name: str, value: np.ndarray) -> str:
        value = np.asarray(value)
        if value.dtype == np.float32 and value.ndim:
            tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=value.shape,
                                 data_location=TensorProto.EXTERNAL)
            tensor.external_data.add(key="location", value="memory")  # never read: the session is given the array
            initializers.append(tensor)
            external[name] = np.ascontiguousarray(value)
        else:
            initializers.append(numpy_helper.from_array(value, name))
        return name

    def node(op: str, inputs: list[str], output: str, **attributes) -> str:
        nodes.append(helper.make_node(op, inputs, [output], **attributes))
        return output

    hidden = weights["embeddings.word_embeddings.weight"].shape[1]
    head = hidden // weights.heads

    def layer_norm(x: str, prefix: str, out: str) -> str:
        return node("LayerNormalization", [x, constant(f"{prefix}.w", weights[f"{prefix}.weight"]),
                                           constant(f"{prefix}.b", weights[f"{prefix}.bias"])],
                    out, axis=-1, epsilon=weights.eps)

    def dense(x: str, name: str, out: str) -> str:
        product = node("MatMul", [x, constant(f"{name}.w", weights[f"{name}.weight"])], f"{out}.product")
        return node("Add", [product, constant(f"{name}.b", weights[f"{name}.bias"])], out)

    split_heads = constant("split_heads", np.array([0, 0, weights.heads, head], dtype=np.int64))
    merge_heads = constant("merge_heads", np.array([0, 0, hidden], dtype=np.int64))
    scale = constant("scale", np.array(np.sqrt(head), dtype=np.float32))
    half, one = constant("half", np.array(0.5, np.float32)), constant("one", np.array(1.0, np.float32))
    root_two = constant("root_two", np.array(np.sqrt(2.0), dtype=np.float32))

    # Padding gets the most negative float as its score, as in transformers: it weighs nothing after the softmax.
    padding = node("Mul", [node("Sub", ["one", "mask"], "unmasked"),
                           constant("lowest", np.array(np.finfo(np.float32).min, np.float32))], "padding.flat")
    padding = node("Unsqueeze", [padding, constant("axes_1_2", np.array([1, 2], dtype=np.int64))], "padding")

    x = layer_norm("embedded", "embeddings.LayerNorm", "x.0")
    for layer in range(weights.layers):
        p = f"encoder.layer.{layer}."

        def heads(name: str, perm: list[int]) -> str:
            projected = dense(x, f"{p}attention.self.{name}", f"{p}{name}")
            return node("Transpose", [node("Reshape", [projected, split_heads], f"{p}{name}.split")],
                        f"{p}{name}.heads", perm=perm)

        q, k_t, v = heads("query", [0, 2, 1, 3]), heads("key", [0, 2, 3, 1]), heads("value", [0, 2, 1, 3])
        scores = node("Div", [node("MatMul", [q, k_t], f"{p}scores.raw"), scale], f"{p}scores.scaled")
        attention = node("Softmax", [node("Add", [scores, padding], f"{p}scores")], f"{p}attention", axis=-1)
        context = node("Transpose", [node("MatMul", [attention, v], f"{p}context.heads")], f"{p}context.t",
                       perm=[0, 2, 1, 3])
        context = node("Reshape", [context, merge_heads], f"{p}context")
        attended = node("Add", [dense(context, f"{p}attention.output.dense", f"{p}attended"), x], f"{p}residual.1")
        x = layer_norm(attended, f"{p}attention.output.LayerNorm", f"{p}x.1")
        inner = dense(x, f"{p}intermediate.dense", f"{p}inner")
        # Exact-erf GELU, as the model was trained with (ONNX Runtime fuses this pattern into one kernel).
        erf = node("Erf", [node("Div", [inner, root_two], f"{p}inner.scaled")], f"{p}erf")
        gelu = node("Mul", [node("Mul", [inner, half], f"{p}inner.half"), node("Add", [erf, one], f"{p}erf.plus")],
                    f"{p}gelu")
        out = node("Add", [dense(gelu, f"{p}output.dense", f"{p}out"), x], f"{p}residual.2")
        x = layer_norm(out, f"{p}output.LayerNorm", f"x.{layer + 1}")

    axis_1 = constant("axis_1", np.array([1], dtype=np.int64))
    token_weights = node("Unsqueeze", ["mask", constant("axis_2", np.array([2], dtype=np.int64))], "token_weights")
    summed = node("ReduceSum", [node("Mul", [x, token_weights], "weighted"), axis_1], "summed", keepdims=0)
    count = node("Max", [node("ReduceSum", [token_weights, axis_1], "count.raw", keepdims=0),
                         constant("tiny_count", np.array(1e-9, np.float32))], "count")
    pooled = node("Div", [summed, count], "pooled")
    norm = node("Max", [node("ReduceL2", [pooled], "norm.raw", axes=[1], keepdims=1),  # axes an input from opset 18
                        constant("tiny_norm", np.array(1e-12, np.float32))], "norm")
    node("Div", [pooled, norm], "vectors")

    graph = helper.make_graph(
        nodes, "bert_sentence_encoder",
        [helper.make_tensor_value_info("embedded", TensorProto.FLOAT, ["batch", "length", hidden]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", "length"])],
        [helper.make_tensor_value_info("vectors", TensorProto.FLOAT, ["batch", hidden])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET)], producer_name="graphrag_pipeline")
    return model, external


class OnnxEmbedder(NumpyEmbedder):
    """`Embedder` over a local sentence-transformers BERT model, evaluated with ONNX Runtime (no torch import); the
    same name, tokens and vectors as the NumPy and torch embedders. The build's default too: on two cores it embedded
    entity names 1.35-1.8x as fast as torch and chunks as fast, and a process loads it in about a second, not seven."""

    def __init__(self, model_path: str, config: EmbedderConfig, *, threads: int | None = None):
        super().__init__(model_path, config, threads=threads)
        self._session_lock = threading.Lock()
        self._inference_session = None
        self._external_weights: list = []

    def prepare(self) -> None:
        super().prepare()
        self._session()

    def _session(self):
        # Under a lock, not a cached_property: ``prepare`` may be building it in another thread when the first
        # question arrives, and a second session would cost as much again.
        with self._session_lock:
            if self._inference_session is None:
                # ONNX Runtime's own telemetry (from 1.29 on POSIX) writes a device id under ~/.cache and sends
                # usage events to Microsoft unless this is set before its environment starts: no network at run
                # time but the user's servers, and no file outside the index.
                os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
                import onnxruntime

                options = onnxruntime.SessionOptions()
                if self._threads is not None:  # None: ONNX Runtime's default, one per core
                    options.intra_op_num_threads = self._threads
                    options.inter_op_num_threads = 1
                model, external = bert_graph(self._weights)
                # The session reads the weights from these arrays for as long as it lives: kept with it.
                self._external_weights = [onnxruntime.OrtValue.ortvalue_from_numpy(a) for a in external.values()]
                options.add_external_initializers(list(external), self._external_weights)
                self._inference_session = onnxruntime.InferenceSession(
                    model.SerializeToString(), options, providers=["CPUExecutionProvider"])
            return self._inference_session

    def _encode(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        embedded = token_embeddings(self._weights, ids).astype(np.float32, copy=False)
        return self._session().run(["vectors"], {"embedded": embedded, "mask": mask.astype(np.float32)})[0]
