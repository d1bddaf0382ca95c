"""Stage 7: hierarchical Leiden communities."""
