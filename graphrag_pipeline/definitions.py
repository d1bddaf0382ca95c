"""Dagster entry point: every asset, check, job, sensor and schedule under `defs/`, bound to the `graphrag` resource.
Backends come from the pipeline's configuration through the backend factory (embedded unless configured)."""

from pathlib import Path

from dagster import Definitions, in_process_executor, load_from_defs_folder

from graphrag_pipeline.defs.resources import GraphRAGResource
from graphrag_pipeline.defs.settings import DEFINITION_SETTINGS, STORE_KINDS
from graphrag_pipeline.lib.compose.backends import store_kinds


def definitions_with(graphrag: GraphRAGResource) -> Definitions:
    """The project's definitions bound to one `graphrag` resource (tests bind an index of their own). The resource's
    configuration must agree with what shaped the definitions: the shard count is the partition set, and the stores
    are the assets' kinds."""
    settings = graphrag.settings()
    if settings.shard_count != DEFINITION_SETTINGS.shard_count or store_kinds(settings) != STORE_KINDS:
        raise ValueError(
            f"the graphrag resource's configuration ({settings.shard_count} shards, stores {store_kinds(settings)}) "
            f"disagrees with the one the definitions were loaded with ({DEFINITION_SETTINGS.shard_count} shards, "
            f"stores {STORE_KINDS}, from $GRAPHRAG_CONFIG or ./graphrag.yaml): point both at the same configuration"
        )
    return Definitions.merge(
        load_from_defs_folder(path_within_project=Path(__file__).parent),
        # A run's steps share one process: the embedder and spaCy load once per run instead of once per step, and
        # the stages write the index one after another (they depend on each other anyway).
        Definitions(resources={"graphrag": graphrag}, executor=in_process_executor),
    )


defs = definitions_with(GraphRAGResource())
