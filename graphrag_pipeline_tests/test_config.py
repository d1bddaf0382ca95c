import pytest
from pydantic import ValidationError

from graphrag_pipeline.lib.config import CatalogSource, ConfluenceSource, EvalSetSource, FolderSource, load_settings


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
    with pytest.raises(ValidationError, match="expected tags: 'folder', 'eval_set', 'confluence', 'catalog'"):
        load_settings(sources=[{"name": "share", "kind": "sharepoint", "path": "/srv/share"}])
    with pytest.raises(ValidationError, match="source 'bench': path is required for a eval_set source"):
        load_settings(sources=[{"name": "bench", "kind": "eval_set"}])


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
