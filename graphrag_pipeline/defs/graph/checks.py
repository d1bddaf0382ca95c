from dagster import AssetCheckResult, asset_check

from graphrag_pipeline.defs.reporting import run_check
from graphrag_pipeline.defs.resources import GraphRAGResource
from graphrag_pipeline.lib.checks import (
    elements_have_provenance,
    entity_vectors,
    graph_matches_elements,
    relationships_have_entities,
)


@asset_check(asset="graph", description="The graph store holds exactly the index's merged entities and relationships.")
def graph_matches_the_index(graphrag: GraphRAGResource) -> AssetCheckResult:
    return run_check(lambda ws: graph_matches_elements(ws.state, ws.graph_store), graphrag)


@asset_check(asset="graph", description="No relationship points at an entity the graph does not hold.")
def relationships_connect_existing_entities(graphrag: GraphRAGResource) -> AssetCheckResult:
    return run_check(lambda ws: relationships_have_entities(ws.graph_store), graphrag)


@asset_check(asset="graph", description="Every entity and relationship names the documents it was read from.")
def elements_name_their_documents(graphrag: GraphRAGResource) -> AssetCheckResult:
    return run_check(lambda ws: elements_have_provenance(ws.graph_store), graphrag)


@asset_check(asset="graph", description="Every entity has a vector in the published `entities` collection (question "
                                        "linking), and the collection holds nothing else.")
def every_entity_has_a_published_vector(graphrag: GraphRAGResource) -> AssetCheckResult:
    return run_check(lambda ws: entity_vectors(ws.state, ws.published_vectors), graphrag)
