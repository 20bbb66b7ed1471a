"""A fusion calibration file (`retrieval.fusion_calibration`) that is missing, unreadable, not JSON
or not calibration fields is a one-line CalibrationFileError naming the file and the problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from cograg.errors import ConfigError
from cograg.retrieval.adaptive_fusion import CalibrationFileError, load_calibration


@pytest.mark.parametrize("content, message", [
    (b"\xff\xfe", r"cal.json is not UTF-8 text \(byte 0\)"),
    (b"confidence_gain: 0.2\n", r"cal.json is not valid JSON at line 1: Expecting value"),
    (b'{"chosen": {"confidence_gain": 0.2}\n', r"cal.json is not valid JSON at line 2"),
    (b"[0.6, 0.7]", r"cal.json must be a JSON object of calibration fields"),
    (b'{"chosen": 0.6}', r"cal.json must be a JSON object of calibration fields"),
    (b'{"chosen": {"confidence_gain": 3}}', r"cal.json: confidence_gain: Input should be less than or equal to 1"),
    (b'{"normalisation": "log"}', r"cal.json: normalisation: Input should be 'minmax' or 'zscore'"),
])
def test_bad_calibration_files_are_config_errors(tmp_path: Path, content: bytes, message: str):
    f = tmp_path / "cal.json"
    f.write_bytes(content)
    with pytest.raises(CalibrationFileError, match=message) as err:
        load_calibration(f)
    assert isinstance(err.value, ConfigError) and "\n" not in str(err.value)


def test_a_missing_or_unreadable_calibration_file_is_a_config_error(tmp_path: Path):
    with pytest.raises(CalibrationFileError, match="cannot read fusion calibration file .*nonexist.json: "
                                                   "No such file or directory"):
        load_calibration(tmp_path / "nonexist.json")
    with pytest.raises(CalibrationFileError, match=f"cannot read fusion calibration file {tmp_path}: Is a directory"):
        load_calibration(tmp_path)


def test_a_calibration_file_error_is_a_server_error_in_the_api():
    pytest.importorskip("fastapi", reason="the HTTP API needs the server extra: pip install -e '.[server]'")
    from cograg.api.errors import status_of

    assert status_of(CalibrationFileError("fusion calibration file cal.json is not valid JSON at line 1")) == 500
    assert status_of(ConfigError("model 'x' is not offered by this server")) == 400
