"""cograg — a Cognitive RAG engine: verified, cited answers over a private document collection."""

from cograg.errors import CogragError

__version__ = "0.1.0"

__all__ = ["CogragError", "__version__"]
