import pytest
from pydantic import ValidationError

from graphrag_pipeline.lib.core.config import (
    CatalogSource,
    ConfigError,
    ConfluenceSource,
    EvalSetSource,
    FolderSource,
    load_settings,
)


def test_defaults_load_and_validate():
    settings = load_settings()
    assert settings.chunking.size == 512 and settings.chunking.overlap == 64
    assert "Service" in settings.ontology.entity_type_names
    assert settings.ontology.relationship_type("depends on") == "DEPENDS_ON"
    assert settings.ontology.relationship_type("was born in") == "RELATED_TO"


def test_user_file_is_merged_over_defaults_and_paths_resolve(tmp_path):
    (tmp_path / "graphrag.yaml").write_text("index_dir: idx\nsources: [{name: docs, path: corpus}]\n"
                                           "retrieval: {max_hops: 1}\n")
    settings = load_settings(tmp_path / "graphrag.yaml")
    assert settings.index_dir == str(tmp_path / "idx")
    assert settings.sources[0].path == str(tmp_path / "corpus")
    assert settings.retrieval.max_hops == 1 and settings.retrieval.vector_top_k == 20


def test_each_source_kind_validates_to_its_own_model_and_a_source_without_a_kind_is_a_folder():
    settings = load_settings(sources=[
        {"name": "docs", "path": "/srv/docs"},
        {"name": "bench", "kind": "eval_set", "path": "/srv/bench"},
        {"name": "wiki", "kind": "confluence", "base_url": "https://example.atlassian.net/wiki", "spaces": ["OPS"]},
        {"name": "services", "kind": "catalog", "path": "/srv/catalog-info.yaml"},
    ])
    assert [type(source) for source in settings.sources] == [FolderSource, EvalSetSource, ConfluenceSource,
                                                             CatalogSource]
    assert settings.with_overrides(shard_count=8).sources == settings.sources  # dumped and validated again
    with pytest.raises(ConfigError, match="expected tags: 'folder', 'eval_set', 'confluence', 'catalog'"):
        load_settings(sources=[{"name": "share", "kind": "sharepoint", "path": "/srv/share"}])
    with pytest.raises(ConfigError, match="source 'bench': path is required for a eval_set source"):
        load_settings(sources=[{"name": "bench", "kind": "eval_set"}])


def test_a_misspelt_key_is_named_with_the_nearest_known_one_and_a_bad_value_with_its_key(tmp_path):
    config = tmp_path / "graphrag.yaml"
    config.write_text("retrival:\n  top_k: 3\nsources:\n  - {name: a, kind: folder, path: ., max_document_byte: 3}\n"
                      "chunking: {size: 0}\nllm: {api_key_env: [1]}\n")
    with pytest.raises(ConfigError) as refused:
        load_settings(config)
    message = str(refused.value)
    assert message.startswith(f"{config}: invalid configuration:")
    assert "  - retrival: unknown key; did you mean retrieval?" in message
    assert "  - sources[0].max_document_byte: unknown key; did you mean sources[0].max_document_bytes?" in message
    assert "  - chunking.size: Input should be greater than or equal to 16 (got 0)" in message
    assert "llm.api_key_env" in message and "[1]" not in message  # a value under a key's name is never echoed
    assert "pydantic" not in message and "http" not in message  # no dump, no documentation URL


def test_a_missing_configuration_file_says_which_path_and_where_it_came_from(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=rf"configuration file nothere.yaml \(the path given\) does not exist "
                                                rf"in {tmp_path}"):
        load_settings("nothere.yaml")
    monkeypatch.setenv("GRAPHRAG_CONFIG", str(tmp_path / "gone.yaml"))
    with pytest.raises(FileNotFoundError, match=r"gone.yaml \(\$GRAPHRAG_CONFIG\) does not exist"):
        load_settings()


@pytest.mark.parametrize("bad", [
    {"ontology": {"entity_types": [{"name": "Bad Label"}], "relationship_types": [{"name": "RELATED_TO"}]}},
    {"ontology": {"entity_types": [{"name": "X`) DETACH DELETE n //"}],
                  "relationship_types": [{"name": "RELATED_TO"}]}},
    {"chunking": {"size": 64, "overlap": 64}},
    {"extraction": {"patterns": [{"type": "Spaceship", "regex": "x"}]}},
    {"extraction": {"patterns": [{"type": "Service", "regex": "(unclosed"}]}},
])
def test_invalid_configuration_is_rejected(bad):
    with pytest.raises((ValidationError, ValueError)):
        load_settings(**bad)
