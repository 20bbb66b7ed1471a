"""Every script under benchmarks/ still imports: a refactor of the package must not leave a
benchmark broken until someone next runs it (`benchmarks/latency.py` once imported a helper that
had moved). Imported in a fresh interpreter, the way the scripts are run; nothing is executed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

IMPORT_ALL = """
import importlib, json, pathlib, sys
sys.path.insert(0, '.')
failed = {}
for p in sorted(pathlib.Path('.').glob('*.py')):
    try:
        importlib.import_module(p.stem)
    except BaseException as exc:  # SystemExit from argparse at import time counts too
        failed[p.name] = f"{type(exc).__name__}: {exc}"
print(json.dumps(failed))
"""


def test_every_benchmark_script_imports():
    scripts = sorted((REPO / "benchmarks").glob("*.py"))
    assert len(scripts) > 20
    out = subprocess.run([sys.executable, "-c", IMPORT_ALL], cwd=REPO / "benchmarks", capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {}
