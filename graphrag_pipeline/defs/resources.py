"""The one Dagster resource: where the pipeline's configuration is. Stores and models come from it through the
backend factory (`lib/compose/backends.py`) and the configured embedder, exactly as the CLI and the query module get theirs,
so the backend a deployment configures (file or GRAPH_BACKEND / VECTOR_BACKEND / NEO4J_* / QDRANT_*) is the one every
process uses. Secrets stay in the environment: the settings name the variables, the stores read them when opened.
"""

from __future__ import annotations

from typing import Optional, Sequence

from dagster import ConfigurableResource

from graphrag_pipeline.lib.compose.workspace import Workspace, llm_usage
from graphrag_pipeline.lib.core.config import PipelineSettings, load_settings
from graphrag_pipeline.lib.core.progress import ProgressListener


class GraphRAGResource(ConfigurableResource):
    """The pipeline's configuration (default: $GRAPHRAG_CONFIG, else ./graphrag.yaml, else the packaged defaults) and
    an optional index directory override; every stage opens its workspace here."""

    config_path: Optional[str] = None
    index_dir: Optional[str] = None

    def settings(self) -> PipelineSettings:
        overrides = {"index_dir": self.index_dir} if self.index_dir else {}
        return load_settings(self.config_path, **overrides)

    def workspace(self, run_id: str | None = None, progress_listeners: Sequence[ProgressListener] = ()) -> Workspace:
        settings = self.settings()
        # This stage's model calls; the budget (if any) is the run's.
        return Workspace(settings, usage=llm_usage(settings, run_id), progress_listeners=progress_listeners)
