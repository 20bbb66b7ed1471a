"""Shared fixtures for the test suite.

Slow tests whose model (or the extra that runs it) is not installed are skipped on a developer's
machine and fail under `CI=true`, where a missing model means a broken install (`missing_model`).

The ingestion tests (normalize, chunking, loaders, store, sync, bad_input, kill9, cli) run with a
clean `COGRAG_*` environment and `COGRAG_EMBEDDER=none` (fixture `ingest_env`): they are about
loading, chunking, syncing and storing, not about embeddings, and must not load a model.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

import pytest
from typer.testing import CliRunner, Result

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "examples" / "corpus"


def _clean_environ() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COGRAG_")}
    env["COGRAG_EMBEDDER"] = "none"
    return env


def in_ci() -> bool:
    """`CI=true`, as GitHub Actions, GitLab CI and most other CI services set it."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def skip_or_fail(reason: str) -> NoReturn:
    """Skip: a model or extra is not installed. Under `CI=true` fail instead, so a broken
    install cannot pass as a run of skipped tests."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: a missing model is a broken install)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def missing_model() -> Callable[[str], NoReturn]:
    """`missing_model(reason)` in a slow test or fixture whose model is not installed: a skip,
    or under `CI=true` a failure."""
    return skip_or_fail


@pytest.fixture
def ingest_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No inherited COGRAG_* settings and no embedder. The ingestion test modules opt in with
    `pytestmark = pytest.mark.usefixtures("ingest_env")`; other suites keep their environment."""
    for key in list(os.environ):
        if key.startswith("COGRAG_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("COGRAG_EMBEDDER", "none")


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    """Where a test's store lives (not created yet)."""
    return tmp_path / "store"


@pytest.fixture
def store(store_dir: Path) -> Iterator:
    """An opened (created) store in `store_dir`."""
    from cograg.index.sqlite_store import SQLiteStore

    s = SQLiteStore(store_dir)
    yield s
    s.close()


@pytest.fixture
def corpus_dir() -> Path:
    return CORPUS


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Result]:
    """Run the `cograg` CLI in-process: `cli("ingest", path, "--store", s, "--json")`.

    The result has `exit_code`, `stdout` and `stderr` (captured separately)."""
    from cograg import cli as cli_module

    # Wide consoles so tables and JSON are never wrapped or truncated.
    monkeypatch.setattr(cli_module.out, "width", 400)
    monkeypatch.setattr(cli_module.err, "width", 400)
    runner = CliRunner()

    def run(*args: object) -> Result:
        return runner.invoke(cli_module.app, [str(a) for a in args])

    return run


@pytest.fixture
def cograg_cmd() -> list[str]:
    """Command prefix to run the CLI in a subprocess."""
    return [sys.executable, "-m", "cograg.cli"]


@pytest.fixture
def cograg_env() -> dict[str, str]:
    """Environment for CLI subprocesses: no inherited COGRAG_* settings, no embedder."""
    return _clean_environ()


def _make_pdf(path: Path, pages: list[str], *, title: str | None = None) -> Path:
    from fpdf import FPDF

    pdf = FPDF()
    if title:
        pdf.set_title(title)
    pdf.set_font("Helvetica", size=11)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 6, text)
    path.parent.mkdir(parents=True, exist_ok=True)
    pdf.output(str(path))
    return path


@pytest.fixture
def make_pdf() -> Callable[..., Path]:
    """`make_pdf(path, pages: list[str], title=None)`: a PDF with one page per string
    (fpdf2, Helvetica, so Latin-1 text only)."""
    return _make_pdf


@pytest.fixture(scope="session")
def demo_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """The example corpus ingested once, on the default 1.5B model and multilingual-e5, for the
    end-to-end tests that only ask questions of it (each its own question or session): one ingest
    and one model load instead of one per test module (~14 s each). The models are prepared first,
    as `make setup` prepares them, so the first answer call restores its instructions' state."""
    from cograg.engine import prepare_models
    from tests.test_e2e_answer import _engine

    eng = _engine(tmp_path_factory.mktemp("demo-engine"), "default", CORPUS)
    prepared = prepare_models(eng.settings)
    assert set(prepared.prefix_states.values()) <= {"saved", "restored"}, prepared
    yield eng
    eng.close()
