"""The agent pool's keeper (``_handout.PoolKeeper`` with a slot maker) outlives a maker
that fails: an agent that never answers ``initialize`` or a directory it cannot make
costs a retry later, not the keeper's thread (which would leave jarvisd with no pool,
saying nothing)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from jarvisd._errors import SandboxError
from jarvisd.sandbox import _handout
from jarvisd.sandbox._handout import PoolKeeper


class _Engine:
    """What the keeper asks of the engine about a made container: it runs."""

    def inspect_container(self, container_id: str) -> dict[str, object]:
        return {"State": {"Running": True}}


def test_a_failing_maker_is_retried_and_its_keeper_lives_on(
    tmp_path: Path, monkeypatch: object
) -> None:
    calls: list[float] = []
    ready = threading.Event()

    def make() -> str:
        calls.append(time.monotonic())
        if len(calls) == 1:
            raise SandboxError("the pooled agent did not answer initialize in time")
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        ready.set()
        return "a" * 64

    monkeypatch.setattr(_handout, "RETRY_AFTER_FAILURE_S", 0.05)  # type: ignore[attr-defined]
    keeper = PoolKeeper(_Engine(), {}, tmp_path / "pool", 1, make=make, forget=lambda _: None)
    keeper.start()
    try:
        assert ready.wait(30), "the keeper stopped after its maker failed"
        deadline = time.monotonic() + 30
        while keeper.ready() != ["a" * 64] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert keeper.ready() == ["a" * 64]
    finally:
        keeper._stop.set()  # (its stop would remove the made container: there is none)
        assert keeper._thread is not None
        keeper._thread.join(10)
