"""Stage 6: the knowledge graph in the graph store."""
