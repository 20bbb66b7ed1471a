"""Helpers shared by the benchmark scripts."""

from __future__ import annotations

from pathlib import Path


def write_section(path: Path, heading: str, section: str) -> None:
    """Replace the `heading` section of a Markdown file (or append it), keeping everything else."""
    path.parent.mkdir(exist_ok=True)
    old = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    start = old.find(heading)
    if start == -1:
        new = old.rstrip() + "\n\n" + section
    else:
        nxt = old.find("\n## ", start + len(heading))
        new = old[:start] + section.rstrip() + "\n" + (old[nxt:] if nxt != -1 else "")
    path.write_text(new.rstrip() + "\n", encoding="utf-8")
