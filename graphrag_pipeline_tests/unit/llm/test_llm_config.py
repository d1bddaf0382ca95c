"""The configuration sections the LLM library reads."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from graphrag_pipeline.lib.core.config import PipelineSettings, default_config_data


def settings(**overrides) -> PipelineSettings:
    return PipelineSettings.model_validate(default_config_data()).with_overrides(**overrides)


def test_packaged_defaults():
    defaults = settings()
    assert defaults.llm.provider == "ollama" and defaults.llm.base_url is None
    assert defaults.llm.prices["gpt-4o-mini"].completion_per_million == 0.60
    assert defaults.llm.budget_usd is None and defaults.llm.cache
    assert defaults.summaries.summarizer == "extractive" and defaults.summaries.report_levels == (0, 1)
    assert defaults.extraction.max_gleanings == 0 and defaults.embedder.model is None


def test_user_prices_merge_over_the_defaults():
    priced = settings(llm={"model": "my-model", "budget_usd": 2.5,
                           "prices": {"my-model": {"prompt_per_million": 1, "completion_per_million": 2}}})
    assert priced.llm.prices["my-model"].completion_per_million == 2
    assert "gpt-4o-mini" in priced.llm.prices


@pytest.mark.parametrize("bad", [
    {"llm": {"provider": "anthropic"}},
    {"llm": {"model": "unpriced", "budget_usd": 1}},
    {"llm": {"embedding_model": "unpriced-embed", "budget_usd": 1}, "embedder": {"provider": "ollama"}},
    {"llm": {"budget_usd": 1}, "embedder": {"provider": "openai", "model": "unpriced-embed"}},
    {"llm": {"api_key": "sk-in-config"}},  # the key belongs in the environment
    {"llm": {"concurrency": 0}},
    {"extraction": {"max_gleanings": 4}},
    {"extraction": {"extractor": "gpt"}},
    {"summaries": {"summarizer": "abstractive"}},
    {"embedder": {"provider": "cohere"}},
])
def test_invalid_llm_configuration_is_rejected(bad):
    with pytest.raises((ValidationError, ValueError)):
        settings(**bad)


def test_a_budget_needs_a_price_for_the_http_embedding_model():
    with pytest.raises(ValidationError, match="no entry for the embedding model 'unpriced-embed'"):
        settings(llm={"budget_usd": 1}, embedder={"provider": "openai", "model": "unpriced-embed"})
    # The local model costs nothing and makes no calls; a priced HTTP model is fine.
    assert settings(llm={"budget_usd": 1, "embedding_model": "unpriced-embed"}).llm.budget_usd == 1
    assert settings(llm={"budget_usd": 1}, embedder={"provider": "openai", "model": "text-embedding-3-small"})
