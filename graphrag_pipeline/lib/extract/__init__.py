"""Extraction: the offline extractor (spaCy NER and patterns) and the LLM extractor."""
