from dagster import AssetCheckResult, asset_check

from graphrag_pipeline.defs.reporting import run_check
from graphrag_pipeline.defs.resources import GraphRAGResource
from graphrag_pipeline.lib.index.checks import quarantine_share


@asset_check(asset="extracted_elements", description="The share of documents and chunks in quarantine stays below "
                                                      "`checks.max_quarantine_share`; the result lists the reasons.")
def quarantine_below_threshold(graphrag: GraphRAGResource) -> AssetCheckResult:
    return run_check(lambda ws: quarantine_share(ws.state, ws.settings.checks.max_quarantine_share), graphrag)
