"""Embedding models: the configured embedder, the ONNX and NumPy encoders of the offline model."""
