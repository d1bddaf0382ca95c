"""Dagster entry point: every asset, job, sensor and schedule under `defs/`; backends from GRAPH_BACKEND and
VECTOR_BACKEND (embedded when unset)."""

from dagster import Definitions, load_defs

import graphrag_pipeline.defs
from graphrag_pipeline.defs.resources import graphrag_from_environment

defs = Definitions.merge(
    load_defs(graphrag_pipeline.defs),
    Definitions(resources={"graphrag": graphrag_from_environment()}),
)
