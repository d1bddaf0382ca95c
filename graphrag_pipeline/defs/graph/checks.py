from typing import Iterator

from dagster import AssetCheckResult, AssetCheckSpec, asset_check, multi_asset_check

from graphrag_pipeline.defs.reporting import check_result, run_check
from graphrag_pipeline.defs.resources import GraphRAGResource
from graphrag_pipeline.lib.checks import (
    GraphContents,
    elements_have_provenance,
    entity_vectors,
    graph_matches_elements,
    relationships_have_entities,
)


@multi_asset_check(specs=[
    AssetCheckSpec("graph_matches_the_index", asset="graph",
                   description="The graph store holds exactly the index's merged entities and relationships."),
    AssetCheckSpec("relationships_connect_existing_entities", asset="graph",
                   description="No relationship points at an entity the graph does not hold."),
    AssetCheckSpec("elements_name_their_documents", asset="graph",
                   description="Every entity and relationship names the documents it was read from."),
])
def graph_integrity(graphrag: GraphRAGResource) -> Iterator[AssetCheckResult]:
    """Three checks over the whole graph, which is read once for all of them."""
    with graphrag.workspace() as ws:
        contents = GraphContents.read(ws.graph_store)
        outcomes = {
            "graph_matches_the_index": graph_matches_elements(ws.state, contents),
            "relationships_connect_existing_entities": relationships_have_entities(contents),
            "elements_name_their_documents": elements_have_provenance(contents),
        }
    for name, outcome in outcomes.items():
        yield check_result(outcome, asset_key="graph", check_name=name)


@asset_check(asset="graph", description="Every entity has a vector in the published `entities` collection (question "
                                        "linking), and the collection holds nothing else.")
def every_entity_has_a_published_vector(graphrag: GraphRAGResource) -> AssetCheckResult:
    return run_check(lambda ws: entity_vectors(ws.state, ws.published_vectors), graphrag)
