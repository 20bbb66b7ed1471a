"""Switches that turn cograg's injection defences off, for the tests and benchmarks that measure
what gets through without them (each takes a `pytest.MonkeyPatch`, so the switch ends with it)."""

from __future__ import annotations

import sys

import pytest


def detector_off(mp: pytest.MonkeyPatch) -> None:
    """Switch the detector off everywhere it is consulted: redaction, the post-check and the
    refusal's evidence filter all go through `scan`, which modules may have imported by name."""
    from cograg.answer import answerer, injection  # noqa: F401  (loaded, so patched below)

    real = injection.scan
    for name, module in list(sys.modules.items()):
        if name.startswith("cograg") and getattr(module, "scan", None) is real:
            mp.setattr(module, "scan", lambda text: [])


def structural_rules_off(mp: pytest.MonkeyPatch) -> None:
    """Switch off the structural second line (cograg.answer.delivery) in the post-check."""
    from cograg.answer import injection

    mp.setattr(injection, "delivery_objection", lambda sentence, question, evidence: None)
