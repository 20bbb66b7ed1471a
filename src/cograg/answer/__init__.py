"""Answering with a citation contract (SPEC C): contract, validation, verifier, refusal, injection defence."""
