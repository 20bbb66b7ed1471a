"""The API keys file (`serve --keys`): undecodable bytes are a one-line ConfigError, and one key
given to two holders is refused, naming the holders but never the key."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the HTTP API needs the server extra: pip install -e '.[server]'")
pytest.importorskip("limits", reason="rate limits need the server extra: pip install -e '.[server]'")

from cograg.api.auth import load_keys  # noqa: E402
from cograg.errors import ConfigError  # noqa: E402

SHARED = "k1-shared-9d0e"


def test_a_keys_file_that_is_not_utf8_is_a_config_error(tmp_path: Path):
    f = tmp_path / "keys.yaml"
    f.write_bytes(b"keys:\n  - name: a\n    key: k\xff\xfe\n")
    with pytest.raises(ConfigError, match="the keys file .*keys.yaml is not UTF-8 text") as err:
        load_keys(f)
    assert "\n" not in str(err.value) and "k\\xff" not in str(err.value)


def test_a_directory_as_the_keys_file_is_a_config_error(tmp_path: Path):
    with pytest.raises(ConfigError, match="cannot read the keys file .*: Is a directory"):
        load_keys(tmp_path)


@pytest.mark.parametrize("second", [f"key: {SHARED}", f"sha256: {hashlib.sha256(SHARED.encode()).hexdigest().upper()}"])
def test_one_key_for_two_holders_is_refused_without_showing_the_key(tmp_path: Path, second: str):
    f = tmp_path / "keys.yaml"
    f.write_text(f"keys:\n  - name: a\n    key: {SHARED}\n  - name: c\n    key: k2\n  - name: b\n    {second}\n",
                 encoding="utf-8")
    with pytest.raises(ConfigError, match="the keys file .*keys.yaml gives 'a' and 'b' the same key") as err:
        load_keys(f)
    assert SHARED not in str(err.value) and hashlib.sha256(SHARED.encode()).hexdigest() not in str(err.value).lower()


def test_distinct_keys_still_load(tmp_path: Path):
    f = tmp_path / "keys.yaml"
    f.write_text("keys:\n  - name: a\n    key: k1\n  - name: b\n    key: k2\n", encoding="utf-8")
    assert [k.name for k in load_keys(f)] == ["a", "b"]
