"""The records loaders: JSON, JSONL and CSV files, one block per record, so that each record is
retrieved and cited on its own (its id and title in the block's metadata).
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator

from cograg.errors import LoaderError
from cograg.ingest.files import FileInfo, open_binary, read_text, short_heading, title_from_name
from cograg.ingest.models import Block, LoadedDocument

_TEXT_FIELDS = ("text", "content", "body", "abstract", "description", "paragraph", "passage")
_TITLE_FIELDS = ("title", "name", "heading", "subject")
_ID_FIELDS = ("_id", "id", "doc_id", "uuid", "key")


def render_record(record: object) -> tuple[str, dict[str, object]]:
    """Text of one JSON/CSV record plus its scalar metadata. Records with a text-like field use
    `title` + text; other records become `key: value` lines."""
    if not isinstance(record, dict):
        return (json.dumps(record, ensure_ascii=False) if not isinstance(record, str) else record), {}
    meta: dict[str, object] = {}
    for k in _ID_FIELDS:
        if k in record and isinstance(record[k], str | int):
            meta["record_id"] = str(record[k])
            break
    text_key = next((k for k in _TEXT_FIELDS if isinstance(record.get(k), str) and record[k].strip()), None)
    if text_key:
        title_key = next((k for k in _TITLE_FIELDS if isinstance(record.get(k), str) and record[k].strip()), None)
        if title_key:
            meta["title"] = short_heading(record[title_key])  # in each chunk's metadata; full in text
        text = (f"{record[title_key]}\n{record[text_key]}" if title_key else record[text_key])
        return text, meta
    lines = []
    for k, v in record.items():
        val = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
        lines.append(f"{k}: {val}")
    return "\n".join(lines), meta


def _record_blocks(records: Iterator[tuple[object, str]]) -> Iterator[Block]:
    off = 0
    for no, (rec, label) in enumerate(records, start=1):
        text, meta = render_record(rec)
        if not text.strip():
            continue
        meta.setdefault("record_id", label or str(no))
        heading = (str(meta["title"]),) if "title" in meta else ()
        yield Block(text=text, orig_start=off, heading_path=heading, meta=meta, kind="record")
        off += len(text) + 2


def load_jsonl(info: FileInfo) -> LoadedDocument:
    def records() -> Iterator[tuple[object, str]]:
        with open_binary(info.path) as fh:
            reader = io.TextIOWrapper(fh, encoding=info.encoding or "utf-8-sig")
            for lineno, line in enumerate(reader, start=1):
                if not line.strip():
                    continue
                try:
                    yield json.loads(line), ""
                except json.JSONDecodeError as exc:
                    raise LoaderError(f"invalid JSON on line {lineno}: {exc.msg}") from exc

    return LoadedDocument("records", title_from_name(info.path), _record_blocks(records()),
                          metadata={"format": "jsonl"}, warnings=list(info.warnings))


def load_json(info: FileInfo) -> LoadedDocument:
    try:
        data = json.loads(read_text(info))
    except json.JSONDecodeError as exc:
        raise LoaderError(f"invalid JSON: {exc.msg} at line {exc.lineno}") from exc
    if isinstance(data, dict):
        lists = [(k, v) for k, v in data.items() if isinstance(v, list) and v]
        items: list[tuple[object, str]]
        if len(lists) == 1:
            items = [(r, "") for r in lists[0][1]]
        else:
            items = [({"key": k, **v} if isinstance(v, dict) else {"key": k, "value": v}, k)
                     for k, v in data.items()]
    elif isinstance(data, list):
        items = [(r, "") for r in data]
    else:
        items = [(data, "")]
    return LoadedDocument("records", title_from_name(info.path), _record_blocks(iter(items)),
                          metadata={"format": "json"}, warnings=list(info.warnings))


def load_csv(info: FileInfo) -> LoadedDocument:
    delimiter = "\t" if info.path.suffix.lower() == ".tsv" else ","

    def records() -> Iterator[tuple[object, str]]:
        with open_binary(info.path) as fh:
            reader = csv.DictReader(io.TextIOWrapper(fh, encoding=info.encoding or "utf-8-sig",
                                                     newline=""), delimiter=delimiter)
            try:
                for row in reader:
                    yield {k: v for k, v in row.items() if k is not None}, ""
            except csv.Error as exc:
                raise LoaderError(f"malformed CSV: {exc}") from exc

    return LoadedDocument("records", title_from_name(info.path), _record_blocks(records()),
                          metadata={"format": "csv"}, warnings=list(info.warnings))
