"""The HTTP service (SPEC F3) and its web page (F4). Needs the `server` extra (FastAPI, uvicorn)."""

from cograg.api.app import create_app

__all__ = ["create_app"]
