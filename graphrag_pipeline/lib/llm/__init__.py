"""Language models over HTTP (OpenAI-compatible servers and Ollama) for extraction, summaries and embeddings.

- ``clients``: chat and embedding clients with timeouts, retries, bounded concurrency and budget checks
- ``errors``: the errors of model calls (``LLMError`` and its kinds)
- ``accounting``: calls, cache hits, tokens, cost and the budget cap of one run
- ``cache``: persistent completion cache, so unchanged content makes no calls on a re-run
- ``prompts``: prompt templates from package files, placeholders validated at load
- ``runner``: cached completions and bounded-concurrency mapping
- ``structured``: JSON answers into pydantic models, with one repair attempt
- ``extraction``: ``LLMExtractor``, chunks to entity and relationship mentions typed by the ontology
- ``summaries``: element description summaries and community reports
"""
