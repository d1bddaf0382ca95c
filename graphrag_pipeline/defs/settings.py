"""The settings the definitions themselves are shaped by — the shard partition count and the asset kinds of the
configured stores — read once, when Dagster loads the definitions, from the same place the resource reads them
($GRAPHRAG_CONFIG, else ./graphrag.yaml, else the packaged defaults). `definitions_with` refuses a resource whose
configuration disagrees, instead of letting partitions and stores drift apart.
"""

from graphrag_pipeline.lib.compose.backends import store_kinds
from graphrag_pipeline.lib.core.config import load_settings

DEFINITION_SETTINGS = load_settings()
STORE_KINDS = store_kinds(DEFINITION_SETTINGS)
