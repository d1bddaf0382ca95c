"""Stage 1: read the configured sources into the document table (raw_documents)."""
