"""``jarvis code`` on a Ray node: its workspace travels there as an archive and its
change comes back, so the records and ``jarvis code apply`` stay on the head.

* :func:`pack` (head, in the task's relay): the workspace's record, its work tree (a
  copy of the project that never held the left-out files; the secret filter is
  applied again here, so a file it names is never in the archive whatever the tree
  holds), its small bookkeeping files, and its branch as a git bundle (the private
  repository borrows the project's objects, which the node does not have). Bounded:
  a workspace over :data:`MAX_ARCHIVE` bytes is refused.
* :func:`unpack` (the node, before the worker gets its start frame): the same
  workspace under the node's own state directory, its record in the node's store.
* :func:`pack_back` (the node, after the worker ended): the record as the run left
  it, the tree, and the commits the run added (a bundle of ``base..branch``); the
  node's copy is removed.
* :func:`unpack_back` (head): the commits fetched into the head's repository, the tree
  and the record replaced, with the head's paths; ``jarvis code show/apply`` then work
  as for a local run.

The archive travels through Ray's object store (``ray.put``): never a task argument's
text, and nothing secret is in it.
"""

from __future__ import annotations

import io
import json
import shutil
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from jarvisd._errors import UsageError, WorkspaceError

__all__ = ["MAX_ARCHIVE", "members", "pack", "pack_back", "unpack", "unpack_back"]

#: Bytes a workspace's archive may take at most (compressed), either way.
MAX_ARCHIVE = 256 * 1024 * 1024
_RECORD = "record.json"
_BUNDLE = "repo.bundle"
_TREE = "tree"
_GIT = "git"
#: Which machine and state directory packed it (:func:`_identity`).
_HEAD = "head.json"
#: In a node's own copy of a workspace (not in the head's).
_NODE_COPY = ".node-copy"


class _Bounded(io.BytesIO):
    def write(self, data: Any) -> int:
        if self.tell() + len(data) > MAX_ARCHIVE:
            raise UsageError(
                f"the workspace's archive is over {MAX_ARCHIVE >> 20} MiB: too big to ship "
                "to a cluster node (run it with --no-daemon, or on a smaller project)"
            )
        return super().write(data)


def _store() -> Any:
    from jarvisd._paths import paths
    from jarvisd.code import CodeStore

    return CodeStore(paths().state / "code.db")


def _state() -> Path:
    from jarvisd._paths import paths

    return paths().state


def _identity() -> str:
    """This machine and its jarvis state directory. A node with the head's (one machine,
    one user, the default directories: a cluster tried on a laptop) already has the
    workspace where the head keeps it: unpacking there would replace the head's copy,
    and removing the node's copy after the run would remove the head's."""
    import os
    import socket

    machine = ""
    for name in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            machine = Path(name).read_text().strip()
            break
        except OSError:
            continue
    info = os.stat(_state())
    return f"{machine or socket.gethostname()}:{info.st_dev}:{info.st_ino}"


def _archive(ws: Any, bundle: Path | None, *, secret_filter: bool) -> bytes:
    from jarvisd.code._workspace import _names

    names = _names()
    root = Path(ws.path).parent
    out = _Bounded()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        record = json.dumps(ws.to_dict()).encode()
        info = tarfile.TarInfo(_RECORD)
        info.size = len(record)
        tar.addfile(info, io.BytesIO(record))
        head = json.dumps(_identity()).encode()
        info = tarfile.TarInfo(_HEAD)
        info.size = len(head)
        tar.addfile(info, io.BytesIO(head))
        if bundle is not None:
            tar.add(bundle, _BUNDLE)
        for path in sorted(root.iterdir()):
            if path.name in (_GIT, _NODE_COPY):
                continue  # travels as the bundle; says where it is, not what
            if path.name != _TREE:
                tar.add(path, path.name, recursive=True)
                continue

            def keep(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
                parts = member.name.split("/")
                return None if secret_filter and names.match(parts[1:] or parts) else member

            tar.add(path, _TREE, recursive=True, filter=keep)
    return out.getvalue()


def members(data: bytes) -> list[str]:
    """The names in an archive (what left the head: the test checks it)."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return tar.getnames()


def _bundle(git_dir: str, ref: str, tmp: Path, exclude: str = "") -> Path | None:
    from jarvisd.code._git import Git

    git = Git(Path(git_dir))
    if exclude and git.run("rev-parse", ref).strip().decode() == exclude:
        return None  # nothing new: an empty bundle is refused by git
    path = tmp / _BUNDLE
    git.run("bundle", "create", "-q", str(path), ref, *([f"^{exclude}"] if exclude else []))
    return path


def _own(tree: Path) -> None:
    """Give the tree to the sandbox's user, as a workspace's copy is (jarvis as root:
    the sandbox runs as another user, who must be able to change the files)."""
    import os

    from jarvisd.code._workspace import _sandbox_owner

    owner = _sandbox_owner()
    if owner is None:
        return
    os.lchown(tree, *owner)
    for top, dirs, files in os.walk(tree):
        for name in dirs + files:
            os.lchown(os.path.join(top, name), *owner)


def _unbundle(git: Any, bundle: Path, ref: str) -> None:
    """The bundle's objects into ``git``, and ``ref`` set to its tip (no fetch: the
    hardened git jarvis runs allows no transport, not even a file)."""
    listed = git.run("bundle", "unbundle", str(bundle)).decode().split()
    tips = dict(zip(listed[1::2], listed[0::2], strict=False))
    if ref not in tips:
        raise WorkspaceError(f"the workspace's bundle has no {ref}")
    git.run("update-ref", ref, tips[ref])


def pack(ws_id: str) -> bytes:
    """The head's workspace ``ws_id`` as an archive for a node (see the module)."""
    store = _store()
    try:
        ws = store.get(ws_id)
    finally:
        store.close()
    if ws.members:
        raise UsageError("jarvis code --candidates on a cluster node is not supported yet")
    with tempfile.TemporaryDirectory(prefix="jarvis-ship-") as tmp:
        bundle = _bundle(ws.git_dir, f"refs/heads/{ws.branch}", Path(tmp))
        return _archive(ws, bundle, secret_filter=True)


def _safe(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """The "data" filter's checks (nothing outside ``dest``, no device, no absolute
    link), keeping the permission bits: the agent's code runs in the sandbox as
    another user of the workspace's group, which must keep its write bit."""
    checked = tarfile.data_filter(member, dest)
    return None if checked is None else checked.replace(mode=member.mode & 0o777, deep=False)


def _extract(data: bytes, root: Path) -> dict[str, Any]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(root, filter=_safe)
    record: dict[str, Any] = json.loads((root / _RECORD).read_text())
    (root / _RECORD).unlink()
    head = root / _HEAD
    record[_HEAD] = json.loads(head.read_text()) if head.exists() else ""
    head.unlink(missing_ok=True)
    return record


def unpack(data: bytes) -> str:
    """Install a shipped workspace on this node; returns where its tree is."""
    from jarvisd.code import Workspace
    from jarvisd.code._git import Git
    from jarvisd.code._workspace import _FORMAT, _private_repository, workspace_root

    state = _state()
    (state / "code").mkdir(parents=True, exist_ok=True, mode=0o700)
    incoming = Path(tempfile.mkdtemp(prefix=".incoming-", dir=state / "code"))
    try:
        record = _extract(data, incoming)
        if record.pop(_HEAD) == _identity():  # the head's own state: the workspace is here
            shutil.rmtree(incoming)
            store = _store()
            try:
                return str(store.get(record["id"]).path)
            finally:
                store.close()
        root = workspace_root(state, record["id"])
        shutil.rmtree(root, ignore_errors=True)  # an earlier attempt's
        incoming.rename(root)
    except BaseException:
        shutil.rmtree(incoming, ignore_errors=True)
        raise
    algorithm = (root / _FORMAT).read_text().strip() if (root / _FORMAT).exists() else "sha1"
    git_dir = root / _GIT
    _private_repository(git_dir, None, algorithm)
    ref = f"refs/heads/{record['branch']}"
    _unbundle(Git(git_dir), root / _BUNDLE, ref)
    Git(git_dir).run("symbolic-ref", "HEAD", ref)
    (root / _BUNDLE).unlink()
    (root / _NODE_COPY).touch()
    _own(root / _TREE)
    ws = Workspace.from_dict({**record, "path": str(root / _TREE), "git_dir": str(git_dir)})
    store = _store()
    try:
        store.put(ws)
    finally:
        store.close()
    return ws.path


def pack_back(ws_id: str) -> bytes:
    """This node's copy of the workspace after its run, as an archive; then removed."""
    from jarvisd.code._workspace import discard

    store = _store()
    try:
        ws = store.get(ws_id)
        if not (Path(ws.path).parent / _NODE_COPY).exists():
            return b""  # the head's own copy (a shared state directory): nothing to bring
        with tempfile.TemporaryDirectory(prefix="jarvis-ship-") as tmp:
            bundle = _bundle(ws.git_dir, f"refs/heads/{ws.branch}", Path(tmp), ws.base)
            # The tree as the run left it: the head replaces its own with it.
            data = _archive(ws, bundle, secret_filter=False)
        discard(ws, store, _state())
        return data
    finally:
        store.close()


def unpack_back(data: bytes) -> None:
    """The run's workspace, as it came back from the node, in place of the head's."""
    from jarvisd.code import Workspace
    from jarvisd.code._git import Git

    if not data:
        return  # the node worked on the head's own copy
    store = _store()
    try:
        with tempfile.TemporaryDirectory(prefix="jarvis-ship-") as tmp:
            back = Path(tmp)
            record = _extract(data, back)
            record.pop(_HEAD)
            ws = store.get(record["id"])
            root = Path(ws.path).parent
            if (back / _BUNDLE).exists():
                _unbundle(Git(Path(ws.git_dir)), back / _BUNDLE, f"refs/heads/{ws.branch}")
            for path in back.iterdir():
                if path.name == _BUNDLE:
                    continue
                target = root / path.name
                if target.is_dir() and not target.is_symlink():
                    shutil.rmtree(target)
                elif target.exists():
                    target.unlink()
                shutil.move(str(path), str(target))
            _own(Path(ws.path))
            here = {"path": ws.path, "git_dir": ws.git_dir, "source": ws.source}
            store.put(Workspace.from_dict({**record, **here}))
    except (OSError, tarfile.TarError, ValueError) as exc:
        raise WorkspaceError(
            f"the workspace that came back could not be put in place: {exc}"
        ) from exc
    finally:
        store.close()
