"""Dagster entry point: every asset, check, job, sensor and schedule under `defs/`; backends from GRAPH_BACKEND and
VECTOR_BACKEND (embedded when unset)."""

from pathlib import Path

from dagster import Definitions, in_process_executor, load_from_defs_folder

from graphrag_pipeline.defs.resources import GraphRAGResource, graphrag_from_environment


def definitions_with(graphrag: GraphRAGResource) -> Definitions:
    """The project's definitions bound to one `graphrag` resource (tests bind an embedded index of their own)."""
    return Definitions.merge(
        load_from_defs_folder(path_within_project=Path(__file__).parent),
        # A run's steps share one process: the embedder and spaCy load once per run instead of once per step, and
        # the stages write the index one after another (they depend on each other anyway).
        Definitions(resources={"graphrag": graphrag}, executor=in_process_executor),
    )


defs = definitions_with(graphrag_from_environment())
