"""Composition: the one factory of an index's stores (backends) and what a stage works with (Workspace)."""
