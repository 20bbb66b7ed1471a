"""Evaluation (SPEC H): retrieval metrics on BEIR-format data; answer metrics come later."""
