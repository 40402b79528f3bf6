"""File requests are confined to the workspace at use time; the wire is bounded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jarvisd._errors import ProtocolError, ToolError
from jarvisd.external import Workspace
from jarvisd.external._transport import check_message


def test_reads_and_writes_inside(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    ws.write_text(str(tmp_path / "a/b/c.txt"), "one\ntwo\nthree\n")
    assert ws.read_text(str(tmp_path / "a/b/c.txt")) == "one\ntwo\nthree\n"
    assert ws.read_text(str(tmp_path / "a/b/c.txt"), line=2, limit=1) == "two\n"
    assert ws.read_text("a/b/c.txt") == "one\ntwo\nthree\n"  # relative: from the root


@pytest.mark.parametrize(
    "path", ["/etc/passwd", "../x", "a/../../x", "", "a\0b", "/tmp/../etc/passwd"]
)
def test_paths_outside_are_refused(tmp_path: Path, path: str) -> None:
    (tmp_path / "a").mkdir()
    with pytest.raises(ToolError):
        Workspace(tmp_path / "a").read_text(path)


def test_a_symlink_on_the_way_is_never_followed(tmp_path: Path) -> None:
    root, outside = tmp_path / "ws", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret").write_text("secret")
    (root / "dir").symlink_to(outside)
    (root / "file").symlink_to(outside / "secret")
    ws = Workspace(root)
    for path in ("dir/secret", "file"):
        with pytest.raises(ToolError, match="symlink"):
            ws.read_text(str(root / path))
    with pytest.raises(ToolError):
        ws.write_text(str(root / "dir/new"), "x")
    with pytest.raises(ToolError):
        ws.write_text(str(root / "file"), "x")
    assert not (outside / "new").exists()
    assert (outside / "secret").read_text() == "secret"


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    ws = Workspace(tmp_path)
    with pytest.raises(ToolError):
        ws.read_text(str(tmp_path / "pipe"))
    with pytest.raises(ToolError):
        ws.write_text(str(tmp_path / "pipe"), "x")


def test_sizes_are_bounded(tmp_path: Path) -> None:
    ws = Workspace(tmp_path, max_read_bytes=10, max_write_bytes=10)
    (tmp_path / "big").write_text("x" * 11)
    with pytest.raises(ToolError, match="larger than 10 bytes"):
        ws.read_text(str(tmp_path / "big"))
    with pytest.raises(ToolError, match="more than 10 bytes"):
        ws.write_text(str(tmp_path / "new"), "y" * 11)


@pytest.mark.parametrize(
    "message",
    [
        [],
        "x",
        {"id": 1, "result": {}},  # no jsonrpc
        {"jsonrpc": "2.0", "id": [1], "result": {}},
        {"jsonrpc": "2.0", "id": True, "result": {}},
        {"jsonrpc": "2.0", "method": 5},
        {"jsonrpc": "2.0", "method": "x", "params": 3},
        {"jsonrpc": "2.0", "id": 1},
        {"jsonrpc": "2.0", "id": 1, "error": "bad"},
    ],
)
def test_malformed_json_rpc_is_named(message: object) -> None:
    with pytest.raises(ProtocolError):
        check_message(message)
