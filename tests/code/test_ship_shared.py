"""`jarvis code` on a Ray node that shares the head's state directory (one machine, one
user, default directories: how a cluster is first tried). The workspace is already
where the node would put it: shipping it there must neither replace nor remove the
head's copy. Tried so as a new user, the run succeeded on the node and then its
workspace was gone ("no workspace ..."): the node's unpack had replaced the head's copy
and its clean-up after the run removed it."""

from __future__ import annotations

from pathlib import Path

from jarvisd._paths import paths
from jarvisd.code import CodeStore
from jarvisd.code import _ship as ship
from jarvisd.code._workspace import prepare


def test_a_node_sharing_the_heads_state_works_on_the_heads_copy(project: Path) -> None:
    store = CodeStore(paths().state / "code.db")
    try:
        ws = prepare(str(project), store=store, state_dir=paths().state, task="t")
    finally:
        store.close()
    (Path(ws.path) / "calc.py").write_text("changed by the agent\n")  # as during the run
    shipped = ship.pack(ws.id)
    assert ship.unpack(shipped) == ws.path  # the node: the head's own copy, untouched
    assert (Path(ws.path) / "calc.py").read_text() == "changed by the agent\n"
    assert ship.pack_back(ws.id) == b""  # nothing to bring back, nothing removed
    ship.unpack_back(b"")
    store = CodeStore(paths().state / "code.db")
    try:
        assert store.get(ws.id).path == ws.path
    finally:
        store.close()
    assert (Path(ws.path) / "calc.py").read_text() == "changed by the agent\n"
