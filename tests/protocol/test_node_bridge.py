"""The Node.js side of the frame protocol (node_bridge/) against the Python side, with
real Node processes: node's own test suite, and a peer that re-encodes whatever Python
sends, compared byte for byte."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jarvisd.protocol import SENTINEL, ErrorFrame, FrameReader, Log, Start, decode_line, encode
from tests.conftest import require
from tests.protocol.test_frames import FRAMES

BRIDGE = Path(__file__).resolve().parents[2] / "node_bridge"


@pytest.fixture(scope="module")
def node() -> str:
    path = shutil.which("node")
    require(
        path is not None, "Node.js is not installed (packaging/dev/setup.sh --test installs it)"
    )
    assert path is not None
    return path


def echo(node: str, data: bytes, **env: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [node, str(BRIDGE / "echo_peer.mjs")],
        input=data, capture_output=True, timeout=60, check=True, env={"PATH": "/usr/bin:/bin", **env},
    )  # fmt: skip


def test_node_test_suite_passes(node: str) -> None:
    proc = subprocess.run(
        [node, "--test", "test/"], cwd=BRIDGE, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "# fail 0" in proc.stdout


def test_node_encodes_every_kind_exactly_as_python(node: str) -> None:
    sent = b"".join(encode(f) for f in FRAMES)
    assert echo(node, sent).stdout == sent


def test_node_refuses_malformed_frames_and_keeps_going(node: str) -> None:
    lines = [
        b"some library printed this\n",
        (SENTINEL + "{not json\n").encode(),
        (SENTINEL + json.dumps({"kind": "launch_missiles", "id": "x"}) + "\n").encode(),
        b"@@jarvis:2@@ {}\n",
        encode(Start(id="after", task="agent")),
    ]
    replies = list(FrameReader(io.BytesIO(echo(node, b"".join(lines)).stdout)))
    errors = [f for f in replies if isinstance(f, ErrorFrame)]
    assert [e.code for e in errors] == ["protocol"] * 3
    assert "not valid JSON" in errors[0].message
    assert "unknown frame kind" in errors[1].message
    assert "version '2' is not supported" in errors[2].message
    assert replies[3] == Start(id="after", task="agent")
    assert isinstance(replies[4], Log) and replies[4].message == "some library printed this"


def test_node_enforces_the_frame_size_cap(node: str) -> None:
    big = encode(Start(id="big", payload={"blob": "x" * 5000}))
    reply = decode_line(echo(node, big, JARVIS_MAX_FRAME_BYTES="1000").stdout)
    assert isinstance(reply, ErrorFrame) and "exceeds the limit of 1000" in reply.message


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    payloads=st.lists(
        st.dictionaries(st.text(max_size=8), json_values, max_size=5), min_size=1, max_size=8
    )
)
def test_random_payloads_cross_unchanged(node: str, payloads: list[dict[str, object]]) -> None:
    frames = [Start(id=f"f{i}", task="agent", payload=p) for i, p in enumerate(payloads)]
    # Equal as data, not always as bytes: JavaScript objects order integer-like keys
    # ("0") first, whatever order they arrived in.
    back = list(FrameReader(io.BytesIO(echo(node, b"".join(encode(f) for f in frames)).stdout)))
    assert back == frames


# Bytes that look like frames often enough to reach every branch of the parser: the
# sentinel, JSON fragments, deep nesting, bad UTF-8 and newlines, mixed at random.
_PIECES = st.sampled_from(
    [SENTINEL.encode(), b"@@jarvis:2@@ ", b"@@jarvis:", b'{"kind": "start", "id": "x"}',
     b'{"kind":', b'"id":', b"[" * 3000, b"{" * 50, b"}", b"\n", b"\r\n", b"\xff\xfe", b"\xc3",
     b"null", b'"\\u0000"', b"1e999", b'{"kind": "result", "id": "r", "result": []}'],
)  # fmt: skip
FUZZ_INPUTS = st.lists(
    st.lists(st.one_of(_PIECES, st.binary(max_size=64)), max_size=12).map(b"".join),
    min_size=1,
    max_size=40,
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inputs=FUZZ_INPUTS)
def test_fuzz_the_node_parser_never_crashes_or_hangs(node: str, inputs: list[bytes]) -> None:
    import base64

    data = json.dumps([base64.b64encode(i).decode() for i in inputs]).encode()
    out = subprocess.run(
        [node, str(BRIDGE / "fuzz_peer.mjs")], input=data, capture_output=True, timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr.decode(errors="replace")[-2000:]
    counts = json.loads(out.stdout)
    assert set(counts) == {"frames", "noise", "refused"}


@settings(max_examples=200, deadline=None)
@given(inputs=FUZZ_INPUTS)
def test_fuzz_the_python_reader_only_raises_frame_error(inputs: list[bytes]) -> None:
    from jarvisd.protocol import FrameError

    for data in inputs:
        reader = FrameReader(io.BytesIO(data), max_bytes=4096, noise_limit=1024)
        try:
            for _ in reader:
                pass
        except FrameError:
            pass
        assert sum(len(n) for n in reader.noise) <= 1024 + 4096
