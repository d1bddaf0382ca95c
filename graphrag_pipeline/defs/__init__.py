"""Dagster definitions: one sub-package per asset (named after it, with its checks) and `automation/` (sensors,
schedules, the corpus-wide condition, jobs); `graphrag_pipeline.definitions` loads this folder."""
