"""Stage 2: token-aware chunks of each changed document."""
