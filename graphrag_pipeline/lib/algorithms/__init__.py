"""The pipeline's algorithms over plain data: chunking, merging extracted elements, hierarchical communities."""
