"""Stage 8: community summaries, embedded for global questions."""
