"""Dagster entry point: every asset, job, sensor and schedule under `defs/`, with the embedded resources by default."""

from dagster import Definitions, load_defs

import graphrag_pipeline.defs
from graphrag_pipeline.defs.resources import embedded_graphrag

defs = Definitions.merge(
    load_defs(graphrag_pipeline.defs),
    Definitions(resources={"graphrag": embedded_graphrag()}),
)
