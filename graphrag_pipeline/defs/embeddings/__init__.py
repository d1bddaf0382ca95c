"""Stage 3: chunk embeddings into the vector store."""
