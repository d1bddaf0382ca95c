"""graphrag_pipeline: documents to a knowledge graph and vector indexes with Dagster; a query module for agents."""

__version__ = "0.1.0"
