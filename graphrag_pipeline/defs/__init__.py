"""Dagster definitions, one sub-package per pipeline stage; `graphrag_pipeline.definitions` loads this folder."""
