"""Mounts as archives (``_archive``), without an engine: what is packed for an engine
on another machine, and how a ``:rw`` mount's tree coming back from it is checked and
applied. The tree comes from the sandbox: every archive here is one a hostile sandbox
(or engine) could hand back."""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from jarvisd._errors import SandboxError
from jarvisd.sandbox._archive import ArchiveLimits, Packer, write_back
from jarvisd.sandbox._copy import NameFilter
from jarvisd.sandbox._mounts import BLOCKED_PATTERNS

NAMES = NameFilter(BLOCKED_PATTERNS)
LIMITS = ArchiveLimits(max_bytes=1 << 20, max_files=100)


def _tar(*members: tuple[str, str, bytes | str]) -> list[bytes]:
    """(name, kind, data): kind "f" file, "d" directory, "l" symlink (data: target),
    "h" hard link (data: target), "p" FIFO, "c" character device."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            info.mode, info.mtime = 0o644, 1_700_000_000
            payload = None
            if kind == "f":
                assert isinstance(data, bytes)
                info.size, payload = len(data), io.BytesIO(data)
            elif kind == "d":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
            elif kind in "lh":
                info.type = tarfile.SYMTYPE if kind == "l" else tarfile.LNKTYPE
                info.linkname = str(data)
            else:
                info.type = tarfile.FIFOTYPE if kind == "p" else tarfile.CHRTYPE
            tar.addfile(info, payload)
    return [out.getvalue()]


@pytest.fixture
def dest(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    root = tmp_path / "ws"
    root.mkdir()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    yield root, fd
    os.close(fd)


def _back(
    chunks: list[bytes], fd: int, sent: set[str] = frozenset(), limits: ArchiveLimits = LIMITS
):  # type: ignore[assignment]
    return write_back(chunks, fd, set(sent), limits, NAMES, "the mount")


def test_blocked_names_are_left_out_and_the_member_list_is_checked_before_sending(
    tmp_path: Path,
) -> None:
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.py").write_text("a")
    (tree / ".env").write_text("API_KEY=hunter2")
    (tree / "sub" / "id_rsa").write_text("key")
    os.mkfifo(tree / "pipe")
    packer = Packer(LIMITS, NAMES)
    fd = os.open(tree, os.O_RDONLY | os.O_DIRECTORY)
    try:
        sent = packer.add_tree("m0", fd, (1000, 1000), filtered=True)
        archive = packer.finish()
        with tarfile.open(fileobj=archive, mode="r:") as sent_tar:
            names = sent_tar.getnames()
    finally:
        os.close(fd)
        packer.close()
    assert sorted(names) == ["m0", "m0/a.py", "m0/sub"]
    assert sent == {"a.py", "sub"}
    # However a blocked name got in, the check of the finished tar stops it.
    packer = Packer(LIMITS, NAMES)
    fd = os.open(tree / "sub", os.O_RDONLY | os.O_DIRECTORY)
    try:
        packer.add_tree("m0", fd, (0, 0), filtered=True)
        os.close(fd)
        packer._tar.addfile(tarfile.TarInfo("m0/sub/.env.local"))
        with pytest.raises(SandboxError, match=r"refused to send 'm0/sub/\.env\.local'"):
            packer.finish()
    finally:
        packer.close()


def test_the_archive_sent_is_bounded_in_files_and_bytes(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    for i in range(5):
        (tree / f"f{i}").write_bytes(b"x" * 1000)
    fd = os.open(tree, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for limits, bound in ((ArchiveLimits(1 << 20, 3), "archive_max_files"),
                              (ArchiveLimits(2500, 100), "archive_max_bytes")):  # fmt: skip
            packer = Packer(limits, NAMES)
            try:
                with pytest.raises(SandboxError, match=f"sandbox.{bound}"):
                    packer.add_tree("m0", fd, (0, 0), filtered=True)
            finally:
                packer.close()
    finally:
        os.close(fd)


def test_a_change_comes_back_written_and_deleted_as_a_bind_would_show_it(
    dest: tuple[Path, int],
) -> None:
    root, fd = dest
    (root / "keep.txt").write_text("old")
    (root / "gone.txt").write_text("x")
    (root / ".env").write_text("API_KEY=hunter2")  # left out when sent: never touched
    chunks = _tar((".", "d", b""), ("./keep.txt", "f", b"new"), ("./sub", "d", b""),
                  ("./sub/n.py", "f", b"n"), ("./hl", "h", "sub/n.py"),
                  ("./.env", "f", b"API_KEY=planted"), ("./pipe", "p", b""),
                  ("./tty", "c", b""))  # fmt: skip
    report = _back(chunks, fd, frozenset({"keep.txt", "gone.txt"}))
    assert sorted(os.listdir(root)) == [".env", "hl", "keep.txt", "sub"]
    assert (root / "keep.txt").read_text() == "new"
    assert (root / "hl").read_text() == "n" and not (root / "hl").is_symlink()
    assert (root / ".env").read_text() == "API_KEY=hunter2"
    assert report.deleted == 1 and sorted(report.skipped) == [".env", "pipe", "tty"]


@pytest.mark.parametrize(
    "members, said",
    [
        ([("/etc/evil", "f", b"x")], "names '/etc/evil'"),
        ([("../evil", "f", b"x")], r"names '\.\./evil'"),
        ([("a/../../evil", "f", b"x")], "names"),
        ([("link", "l", "{outside}"), ("link/evil", "f", b"x")], "is under a symlink"),
    ],
)
def test_a_hostile_change_is_refused_whole_before_anything_is_written(
    dest: tuple[Path, int], tmp_path: Path, members: list[tuple[str, str, bytes | str]], said: str
) -> None:
    root, fd = dest
    outside = tmp_path / "outside"
    outside.mkdir()
    members = [("first.txt", "f", b"1"), *members]
    members = [(n, k, d.format(outside=outside) if isinstance(d, str) else d)
               for n, k, d in members]  # fmt: skip
    with pytest.raises(SandboxError, match=said):
        _back(_tar(*members), fd)
    assert os.listdir(root) == [] and os.listdir(outside) == []


def test_writing_back_never_follows_a_symlink_out_of_the_mount(
    dest: tuple[Path, int], tmp_path: Path
) -> None:
    """Symlinks on the host's side (made there meanwhile, or sent as links): a write
    through one would land outside the mount."""
    root, fd = dest
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("safe")
    os.symlink(outside, root / "dir")
    os.symlink(outside / "victim", root / "file")
    # A member under the host's link, its directory not in the archive: refused.
    with pytest.raises(SandboxError, match="is not under a directory"):
        _back(_tar(("dir/victim", "f", b"owned")), fd)
    # The archive says they are a directory and a file: the links are replaced.
    _back(_tar(("dir", "d", b""), ("dir/victim", "f", b"owned"), ("file", "f", b"owned")), fd)
    assert (outside / "victim").read_text() == "safe"
    assert not (root / "dir").is_symlink() and (root / "dir" / "victim").read_text() == "owned"
    assert not (root / "file").is_symlink() and (root / "file").read_text() == "owned"


def test_the_change_is_bounded_in_bytes_and_files(dest: tuple[Path, int]) -> None:
    root, fd = dest
    with pytest.raises(SandboxError, match=r"sandbox\.archive_max_bytes"):
        _back(_tar(("big", "f", b"x" * 5000)), fd, limits=ArchiveLimits(4000, 100))
    with pytest.raises(SandboxError, match=r"sandbox\.archive_max_files"):
        _back(_tar(*[(f"f{i}", "f", b"") for i in range(5)]), fd, limits=ArchiveLimits(4000, 4))
    assert os.listdir(root) == []


def test_deleting_what_is_gone_never_follows_a_link_the_sandbox_put_in_its_place(
    dest: tuple[Path, int], tmp_path: Path
) -> None:
    """The sandbox replaced the directory ``sub`` (sent with ``sub/k.py``) by a link to
    a directory outside: ``sub/k.py`` is gone from its tree, but deleting it through
    the link would delete the outside's ``k.py``."""
    root, fd = dest
    (root / "sub").mkdir()
    (root / "sub" / "k.py").write_text("k")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "k.py").write_text("theirs")
    _back(_tar(("sub", "l", str(outside))), fd, frozenset({"sub", "sub/k.py"}))
    assert os.readlink(root / "sub") == str(outside)
    assert (outside / "k.py").read_text() == "theirs"
