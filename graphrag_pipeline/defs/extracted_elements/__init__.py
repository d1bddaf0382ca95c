"""Stage 4: entities and relationships per chunk."""
