"""Hypothesis fuzz of the socket: random bytes and malformed requests never bring the
daemon down, and every complete line gets a reply."""

from __future__ import annotations

import json
import socket

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import DaemonProcess

pytestmark = pytest.mark.slow

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
# Requests that look almost right: real ops (never shutdown), wrong field types.
OPS = ["ping", "status", "ask", "task.submit", "task.list", "task.show", "task.logs",
       "task.wait", "task.cancel", "bogus", ""]  # fmt: skip
near_requests = st.fixed_dictionaries(
    {"v": st.sampled_from([1, 1, 1, 0, 2, "1", None]), "op": st.sampled_from(OPS)},
    optional={
        "id": json_values,
        "spec": json_values,
        "task": json_values,
        "since": json_values,
        "follow": json_values,
        "timeout": st.sampled_from([-1, 0, 0.001, "x", None]),
        "states": json_values,
        "limit": json_values,
        "watch": json_values,
    },
).map(lambda d: json.dumps(d).encode())
payloads = st.one_of(
    st.binary(max_size=400).filter(lambda b: b"\n" not in b),
    json_values.map(lambda v: json.dumps(v).encode()),
    near_requests,
)


def test_fuzzed_frames_never_bring_the_daemon_down(jarvisd: DaemonProcess) -> None:
    jarvisd.write_config("max_frame_bytes = 2048\ntask_timeout = 5.0")
    jarvisd.start()
    path = str(jarvisd.paths.socket)
    seen: set[str] = set()

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
    @given(payload=payloads)
    def one(payload: bytes) -> None:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(20)
            s.connect(path)
            s.sendall(payload + b"\n")
            if not payload.strip():
                return  # blank lines are skipped (no reply), like keep-alive noise
            line = s.makefile("rb").readline()
        reply = json.loads(line)  # every reply is a valid protocol line
        assert reply["v"] == 1 and isinstance(reply["type"], str)
        seen.add(reply.get("code", reply["type"]))

    one()
    assert {"bad_request", "version"} <= seen
    assert jarvisd.client.ping().pid == jarvisd.proc.pid  # type: ignore[union-attr]
    assert jarvisd.proc.poll() is None  # type: ignore[union-attr]
    assert "Traceback" not in jarvisd.log_text()
