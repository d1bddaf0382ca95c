"""Stage 5: merged element summaries."""
