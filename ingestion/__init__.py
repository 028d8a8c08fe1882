"""Ingestion: article sources -> chunks -> embeddings -> vector store + article store."""
