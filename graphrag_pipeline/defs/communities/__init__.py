"""Stages 7 and 8: hierarchical Leiden communities and their summaries."""
