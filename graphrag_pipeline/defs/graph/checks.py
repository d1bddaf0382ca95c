from typing import Iterator

from dagster import AssetCheckExecutionContext, AssetCheckResult, AssetCheckSpec, asset_check, multi_asset_check

from graphrag_pipeline.defs.reporting import check_result, run_check
from graphrag_pipeline.defs.resources import GraphRAGResource
from graphrag_pipeline.lib.index.checks import (
    GraphContents,
    elements_have_provenance,
    entity_vectors,
    graph_matches_elements,
    relationships_have_entities,
)


# Blocking where a failure is damage at any moment: communities and summaries must not be built over relationships to
# missing entities or elements without provenance. `graph_matches_the_index` compares the graph with the merged
# elements, which a concurrent run over other shards (deploy/SCALE_OUT.md) changes in between: it would stop a
# healthy run, so it reports without blocking. Subsettable: the UI can execute each one alone (the three read the
# graph once when they run together).
@multi_asset_check(specs=[
    AssetCheckSpec("graph_matches_the_index", asset="graph",
                   description="The graph store holds exactly the index's merged entities and relationships."),
    AssetCheckSpec("relationships_connect_existing_entities", asset="graph", blocking=True,
                   description="No relationship points at an entity the graph does not hold."),
    AssetCheckSpec("elements_name_their_documents", asset="graph", blocking=True,
                   description="Every entity and relationship names the documents it was read from."),
], can_subset=True)
def graph_integrity(context: AssetCheckExecutionContext, graphrag: GraphRAGResource) -> Iterator[AssetCheckResult]:
    """Three checks over the whole graph, which is read once for those selected."""
    selected = {key.name for key in context.selected_asset_check_keys}
    with graphrag.workspace() as ws:
        contents = GraphContents.read(ws.graph_store)
        outcomes = {
            "graph_matches_the_index": lambda: graph_matches_elements(ws.state, contents),
            "relationships_connect_existing_entities": lambda: relationships_have_entities(contents),
            "elements_name_their_documents": lambda: elements_have_provenance(contents),
        }
        results = {name: outcome() for name, outcome in outcomes.items() if name in selected}
    for name, outcome in results.items():
        yield check_result(outcome, asset_key="graph", check_name=name)


@asset_check(asset="graph", description="Every entity has a vector in the published `entities` collection (question "
                                        "linking), and the collection holds nothing else.")
def every_entity_has_a_published_vector(graphrag: GraphRAGResource) -> AssetCheckResult:
    return run_check(lambda ws: entity_vectors(ws.state, ws.published_vectors), graphrag)
