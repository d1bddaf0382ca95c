"""Fixtures of the LLM tests: the fake OpenAI/Ollama server (defined with the server so other suites can import it)."""

from graphrag_pipeline_tests.fake_llm_server import llm_server  # noqa: F401 (pytest finds fixtures by name)
