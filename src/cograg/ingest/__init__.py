"""Ingestion: loaders (A1), normalisation (A2), chunking (A3) and incremental sync (A4)."""
