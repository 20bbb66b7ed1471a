"""Documents: upload and ingest, list, delete; one chunk's passage (what a citation opens).

Uploads are written under `<store>/uploads/<caller>/` (a folder per key, one shared by anonymous
callers; a file name with a path in it is refused) and ingested like `cograg ingest FILE`. Callers
never share a file, so no caller can replace, re-ACL or probe (by an "unchanged" answer) another's
document by uploading one of the same name; a document there the caller may not read is not
replaced either (409), and an upload may set only ACL groups of the caller's own (403). Each file
streams into a temporary file of its own and is moved into place whole, one upload of a caller at
a time; a file over the size limit is refused with 413 while it streams in; a file the loaders
cannot use (binary, empty, corrupt, unsupported type) is removed again and reported with the
loader's reason.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, File, Form, Request, UploadFile
from fastapi.responses import JSONResponse

from cograg.api.access import allowed_doc_ids, may_read
from cograg.api.auth import Caller, caller_of
from cograg.api.body_limit import megabytes
from cograg.api.errors import NotFound, PayloadTooLarge, error_response
from cograg.api.schemas import DocumentInfo, UploadResult
from cograg.api.state import api_state
from cograg.documents import Document
from cograg.engine import Engine
from cograg.errors import CogragError, StoreError
from cograg.locks import directory_lock
from cograg.retrieval.models import source_text_withheld
from cograg.text import shown_ref, soft_line_breaks

router = APIRouter(prefix="/api", tags=["documents"])

MAX_FILES_PER_UPLOAD = 20
_COPY_BLOCK = 1 << 16
_BAD_NAME = re.compile(r"[\x00-\x1f\x7f]")
_NOT_FOLDER_SAFE = re.compile(r"[^A-Za-z0-9_-]+")
STAGING = ".incoming"  # under uploads/: files still streaming in (hidden: a walk of uploads/ skips it)


class UploadRejected(CogragError):
    """No uploaded file could be used."""


def document_info(doc: Document, *, deletable: bool = False, in_answers: bool = True,
                  visible: bool = True) -> DocumentInfo:
    """What the API shows of `doc`; `deletable`: whether the caller asking may delete it over HTTP
    (it uploaded it: `uploaded_by`); `in_answers`: whether the corpus policy lets answers use it;
    `visible`: the policy's `snippet_visible` (false: a title read from the text, such as a
    Markdown heading, gives way to the file name's)."""
    source = Path(doc.source_path).name
    title = doc.title if visible else source_text_withheld({"title": doc.title, "source": source})["title"]
    return DocumentInfo(doc_id=doc.doc_id, title=title, source=source,
                        doc_type=doc.doc_type, tags=doc.tags, chunk_count=doc.chunk_count,
                        size_bytes=doc.size_bytes, updated_at=doc.updated_at, deletable=deletable,
                        in_answers=in_answers)


def uploaded_by(upload_dir: Path, caller: Caller, doc: Document) -> bool:
    """Whether `doc` is a file `caller` uploaded: one in its folder under uploads/. Only such a
    document may be deleted over HTTP; the operator's corpus is deleted with `cograg docs delete`."""
    return (upload_dir / caller_folder(caller)).resolve() in Path(doc.source_path).resolve().parents


def safe_upload_name(name: str | None) -> str:
    """The file name to store an upload under; a name with a directory part is refused."""
    name = (name or "").strip()
    if not name:
        raise UploadRejected("an uploaded file has no name")
    if "/" in name or "\\" in name:
        # named by its last part: the error text has server paths cut to their file name anyway
        last = re.split(r"[/\\]", name.rstrip("/\\"))[-1]
        raise UploadRejected(f"the file {last[:80]!r} was sent with a directory in its name "
                             "(no paths allowed): send the file name alone")
    if name in (".", "..") or _BAD_NAME.search(name):
        raise UploadRejected(f"file name {name[:80]!r} is not a plain file name (no '.', '..' or control characters)")
    if name.startswith("."):
        raise UploadRejected(f"file name {name[:80]!r} is hidden (starts with a dot)")
    if len(name.encode("utf-8")) > 200:
        raise UploadRejected("file name too long (200 bytes at most)")
    return name


def _split(value: str | None) -> list[str] | None:
    return None if value is None else [v.strip() for v in value.split(",") if v.strip()]


def caller_folder(caller: Caller) -> str:
    """The folder under uploads/ of `caller`'s files: its owner name made safe for a file name
    (for whoever reads the folder) and a hash of the whole name, so two names made alike never
    share one. Anonymous callers share theirs; no key can be named like them (auth.ANONYMOUS_OWNER)."""
    owner = caller.owner or ""
    readable = _NOT_FOLDER_SAFE.sub("_", owner).strip("_")[:40] or "caller"
    return f"{readable}-{hashlib.sha256(owner.encode('utf-8')).hexdigest()[:12]}"


def acl_outside(caller: Caller, acl: list[str] | None) -> list[str]:
    """The ACL entries `caller` may not give an upload: any it does not hold itself (a group of its
    key, `user:NAME`, `tenant:NAME`); one it could not read back would lock it out or let it pose as
    another group's source. An anonymous caller holds none."""
    held = set(caller.principal.acl_keys())
    return sorted(set(acl or []) - held)


def _stage(upload: UploadFile, name: str, staging: Path, limit: int) -> Path:
    """`upload` written whole to a new temporary file of its own in `staging` (never a path another
    request writes), which is removed again if it is over `limit` or the copy fails."""
    fd, tmp_name = tempfile.mkstemp(dir=staging, prefix=".upload-", suffix=".part")
    tmp = Path(tmp_name)
    try:
        written = 0
        with os.fdopen(fd, "wb") as out:
            while block := upload.file.read(_COPY_BLOCK):
                written += len(block)
                if written > limit:
                    raise PayloadTooLarge(f"{name} is larger than the upload limit of {megabytes(limit)}")
                out.write(block)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


@router.get("/documents", response_model=list[DocumentInfo], summary="List the documents the caller may read")
def list_documents(request: Request) -> list[DocumentInfo]:
    state, caller = api_state(request), caller_of(request)
    with state.engines.engine() as engine:
        allowed = allowed_doc_ids(engine, caller)
        policy = engine.components.policy.get()
        return [document_info(d, deletable=uploaded_by(state.upload_dir, caller, d),
                              in_answers=policy.admits(d.source_path, d.tags), visible=policy.snippet_visible)
                for d in engine.documents() if allowed is None or d.doc_id in allowed]


@router.post("/documents", response_model=UploadResult, summary="Upload files and ingest them")
def upload_documents(request: Request, files: Annotated[list[UploadFile], File(description="files to ingest")],
                     tags: Annotated[str | None, Form(description="comma-separated tags")] = None,
                     acl: Annotated[str | None, Form(description="comma-separated ACL groups")] = None,
                     ) -> UploadResult | JSONResponse:
    state = api_state(request)
    # a declared or streamed size over the limit never gets here: body_limit.BodyLimit answers 413
    if not files:
        raise UploadRejected("no file in the upload")
    if len(files) > MAX_FILES_PER_UPLOAD:
        raise UploadRejected(f"at most {MAX_FILES_PER_UPLOAD} files per upload")
    names = [safe_upload_name(f.filename) for f in files]
    twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if twice is not None:  # both would be stored under one name: which one the store kept would be chance
        raise UploadRejected(f"the file {twice[:80]!r} is sent twice in one upload: send each file name once")
    caller, acl_groups = caller_of(request), _split(acl)
    refused = acl_outside(caller, acl_groups)
    if refused:
        shown = ", ".join(repr(g[:40]) for g in refused[:5]) + (" …" if len(refused) > 5 else "")
        return error_response(403, f"acl may name only groups of your own key (or none), not {shown}", "forbidden")
    folder = state.upload_dir / caller_folder(caller)
    staging = state.upload_dir / STAGING
    staged: dict[str, Path] = {}
    # a place in the upload queue before anything is staged: each upload waiting here (or on the
    # locks below) holds a worker thread, so only a few may wait and the rest get 429 at once
    with state.upload_admission.turn():
        folder.mkdir(parents=True, exist_ok=True)
        staging.mkdir(exist_ok=True)
        try:
            for upload, name in zip(files, names):
                staged[name] = _stage(upload, name, staging, state.max_upload_bytes)
            # one upload of a caller at a time (across worker processes too): the file moved into
            # place is the one ingested, never another request's of the same name
            with directory_lock(folder), state.engines.engine() as engine:
                return _place_and_ingest(engine, caller, folder, staged, tags=_split(tags), acl=acl_groups)
        finally:  # whatever did not reach its place: an error, a refusal, a client gone
            for tmp in staged.values():
                tmp.unlink(missing_ok=True)


def _place_and_ingest(engine: Engine, caller: Caller, folder: Path, staged: dict[str, Path], *,
                      tags: list[str] | None, acl: list[str] | None) -> UploadResult | JSONResponse:
    """Move the staged files (name → temporary file) into `folder` and ingest them; a staged file
    that is moved leaves `staged`. A document in the folder the caller may not read (its ACL or the
    key's groups changed since) is refused, 409, before anything moves."""
    paths = [(folder / name).resolve() for name in staged]
    for p in paths:
        doc = engine.store.get_document_by_path(str(p))
        if doc is not None and not may_read(engine, caller, doc):
            return error_response(409, f"{p.name} cannot be replaced by this key: upload it under another name")
    new = [p for p in paths if not p.exists()]
    try:
        for name, p in zip(list(staged), paths):  # only complete files reach the folder that is ingested
            os.replace(staged[name], p)
            del staged[name]
        summary = engine.ingest(paths, tags=tags, acl=acl)
    except BaseException:
        for p in new:  # nothing was ingested: no new file stays behind for a later re-sync to find
            p.unlink(missing_ok=True)
        raise
    skipped = {str(Path(s.path).resolve()): s.reason for s in summary.skipped}
    for p in paths:
        if str(p) in skipped:
            p.unlink(missing_ok=True)
    if paths and len(skipped) >= len(paths):
        raise UploadRejected("; ".join(f"{Path(p).name}: {r}" for p, r in skipped.items()))
    docs = [d for p in paths if str(p) not in skipped
            for d in [engine.store.get_document_by_path(str(p))] if d is not None]
    policy = engine.components.policy.get()
    return UploadResult(documents=[document_info(d, deletable=True,  # the caller's own uploads
                                                 in_answers=policy.admits(d.source_path, d.tags)) for d in docs],
                        added=summary.added, updated=summary.updated,
                        unchanged=summary.unchanged,
                        skipped=[{"file": Path(p).name, "reason": r} for p, r in skipped.items()],
                        warnings=[{"file": Path(w.path).name, "reason": w.reason} for w in summary.warnings],
                        chunks=summary.chunks)


@router.delete("/documents/{ref}", response_model=DocumentInfo,
               summary="Delete a document the caller uploaded, and its chunks")
def delete_document(ref: str, request: Request) -> DocumentInfo | JSONResponse:
    """Only the caller's own uploads: any other document it may read is a 403 (the operator
    deletes the corpus with `cograg docs delete`), one it may not read a 404, as if it did not exist."""
    state, caller = api_state(request), caller_of(request)
    with state.engines.engine() as engine:
        try:
            # by id or path only, and among the documents the caller may read: an error about
            # several documents of one file name or id prefix would tell of documents it may not read
            doc = engine.document(ref, by_name=False, allowed=allowed_doc_ids(engine, caller))
            if not may_read(engine, caller, doc):  # not theirs: 404
                raise NotFound(f"no document matches {shown_ref(ref)}")
            if not uploaded_by(state.upload_dir, caller, doc):
                return error_response(403, f"{Path(doc.source_path).name} was not uploaded by this key: only its "
                                      "uploader (or the operator, with `cograg docs delete`) may delete it",
                                      "forbidden")
            doc = engine.delete_document(doc.doc_id)  # by its whole id: the document checked, no other
        except StoreError as exc:
            raise NotFound(str(exc)) from None
    path = Path(doc.source_path)
    if state.upload_dir.resolve() in path.parents:  # an uploaded file goes too, or a re-sync would bring it back
        path.unlink(missing_ok=True)
    return document_info(doc)


@router.get("/chunks/{chunk_id}", summary="One passage: what a citation points to")
def get_chunk(chunk_id: str, request: Request) -> dict[str, Any]:
    state = api_state(request)
    with state.engines.engine() as engine:
        chunk = engine.store.get_chunk(chunk_id)
        doc = engine.store.get_document(chunk.doc_id) if chunk is not None else None
        readable = may_read(engine, caller_of(request), doc)
    policy = state.engines.policy()
    # a passage the corpus policy keeps out of every answer (allow_sources, deny_tags) is not
    # served by its id either: as if it did not exist, like one the caller's ACL does not reach
    if chunk is None or doc is None or not readable or not policy.admits(doc.source_path, doc.tags):
        raise NotFound(f"no chunk {shown_ref(chunk_id)}")
    visible = bool(policy.snippet_visible)
    # `reflowed`: the text as a reader takes it, the line breaks that wrap a paragraph's lines read
    # as spaces (cograg.text.soft_line_breaks); the same length, so a quote found in `text` is
    # shown at the same offsets in it
    body: dict[str, Any] = {
        "chunk_id": chunk.chunk_id, "doc_id": chunk.doc_id, "source": Path(doc.source_path).name,
        "title": doc.title, "heading_path": chunk.heading_path, "page": chunk.page,
        "text": chunk.text, "reflowed": soft_line_breaks(chunk.text), "snippet_visible": visible}
    return body if visible else {**body, **source_text_withheld(body)}


__all__ = ["STAGING", "UploadRejected", "acl_outside", "caller_folder", "document_info", "router",
           "safe_upload_name", "uploaded_by"]
