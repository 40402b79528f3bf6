"""The cluster backend's pieces that need no cluster: its config keys, what a task asks
of a node, and that Ray is never imported unless the backend is ``ray``."""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys

import pytest

from jarvisd._config import Config, parse_config
from jarvisd._errors import ConfigError, UsageError
from jarvisd.cluster import LocalBackend, RayBackend, backend_for, needs
from jarvisd.cluster._placement import NodeInfo, labels, unmet
from jarvisd.runs import AgentSpec

from ..conftest import require


def test_the_cluster_section_is_checked_with_clear_errors() -> None:
    assert isinstance(backend_for(Config()), LocalBackend)
    for address in ("auto", "127.0.0.1:6379", "ray://head.example:10001", "[::1]:6379"):
        config = parse_config({"cluster": {"backend": "ray", "address": address}})
        assert isinstance(backend_for(config), RayBackend)
        assert config.cluster.address == address
    with pytest.raises(ConfigError, match=r"cluster\.backend: expected one of 'local', 'ray'"):
        parse_config({"cluster": {"backend": "k8s"}})
    for bad in ("http://head:10001", "head", "ray://head", ""):
        with pytest.raises(ConfigError, match=r'cluster\.address: expected "auto", "HOST:PORT"'):
            parse_config({"cluster": {"address": bad}})


def test_a_task_asks_for_what_its_spec_needs() -> None:
    config = Config()
    assert needs(AgentSpec(input="x"), config) == {"jarvis": 1.0}
    assert needs(AgentSpec(input="x", isolation="sandbox"), config) == {
        "jarvis": 1.0,
        "docker": 1.0,
    }
    embedded = AgentSpec(input="x", engine="llamacpp", model="qwen2.5-coder-1.5b")
    assert needs(embedded, config) == {"jarvis": 1.0, "model:qwen2.5-coder-1.5b": 1.0}


def test_a_task_no_node_can_run_is_named_with_what_it_asked() -> None:
    wanted = {"jarvis": 1.0, "docker": 1.0}
    both = [NodeInfo({"jarvis": 4.0}), NodeInfo({"jarvis": 4.0, "docker": 1.0})]
    assert unmet(wanted, both) == ""
    why = unmet(wanted, [NodeInfo({"jarvis": 4.0, "CPU": 2.0})])
    # What no node has is named, not only what was asked.
    assert why == "no node of the Ray cluster (1 live) has docker=1, jarvis=1 (none has docker)"
    assert unmet(wanted, []) == "the Ray cluster has no live node"
    # Each part on some node, never both on one.
    apart = [NodeInfo({"jarvis": 4.0}), NodeInfo({"docker": 1.0})]
    assert unmet(wanted, apart).endswith("has docker=1, jarvis=1 all on one node")


def test_node_labels_narrow_placement_and_conflicts_are_refused() -> None:
    nodes = [NodeInfo({"jarvis": 4.0}, {"zone": "a"}), NodeInfo({"jarvis": 4.0}, {"zone": "b"})]
    assert unmet({"jarvis": 1.0}, nodes, {"zone": "b"}) == ""
    why = unmet({"jarvis": 1.0}, nodes, {"zone": "mars"})
    assert why == (
        "no node of the Ray cluster (2 live) has jarvis=1, label zone=mars "
        "(none has label zone=mars; their labels: zone=a, zone=b)"
    )
    config = parse_config({"cluster": {"require": ["zone=b", "gpu"]}})
    assert needs(AgentSpec(input="x"), config) == {"jarvis": 1.0, "gpu": 1.0}
    assert labels(AgentSpec(input="x", node_labels=("disk=ssd",)), config) == {
        "zone": "b",
        "disk": "ssd",
    }
    with pytest.raises(
        UsageError, match=r"--node-label zone=a: \[cluster\] require asks for zone=b"
    ):
        labels(AgentSpec(input="x", node_labels=("zone=a",)), config)
    with pytest.raises(ConfigError, match=r"cluster\.require: expected \"KEY=VALUE\""):
        parse_config({"cluster": {"require": ["a b"]}})


def test_ray_is_imported_by_neither_the_cli_nor_the_daemon() -> None:
    code = (
        "import contextlib, io, sys\n"
        "from jarvisd.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['--help'])\n"
        "import jarvisd.daemon._server, jarvisd.daemon._tasks, jarvisd.cluster\n"
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_cluster_that_does_not_answer_is_said_so_within_the_bound() -> None:
    """Ray retries an address nothing answers for minutes; the relay and the submit
    probe give up at their bound, saying where and why. Where nothing listens at all,
    that is known at once."""
    require(importlib.util.find_spec("ray") is not None, "ray is not installed")
    silent = socket.socket()  # accepts connections (the kernel does), never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    port = silent.getsockname()[1]
    code = (
        "import time\n"
        "from jarvisd.cluster._relay import connect, keep_loopback\n"
        "keep_loopback('127.0.0.1:9')\n"
        "began = time.monotonic()\n"
        "print(connect('127.0.0.1:9', 30.0), round(time.monotonic() - began) < 30)\n"
        f"print(connect('127.0.0.1:{port}', 3.0))\n"
        "import os, sys; sys.stdout.flush(); os._exit(0)\n"
    )
    try:
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
        )
    finally:
        silent.close()
    refused, silence = out.stdout.strip().splitlines()
    assert refused == "the Ray cluster at 127.0.0.1:9 cannot be reached: Connection refused True"
    assert silence == f"the Ray cluster at 127.0.0.1:{port} did not answer within 3 s"


def test_the_stub_speaks_the_workers_frames_and_exit_codes() -> None:
    """The stub imports nothing of jarvisd: what it spells out by hand must stay what
    the daemon reads (its error frame, its "host gone" status)."""
    from jarvisd._procs import EXIT_HOST_GONE
    from jarvisd.cluster import _stub
    from jarvisd.protocol import MAX_FRAME_BYTES, ErrorFrame, decode_line

    assert _stub.EXIT_HOST_GONE == EXIT_HOST_GONE
    assert _stub.MAX_FRAME_BYTES == MAX_FRAME_BYTES
    frame = decode_line(_stub._error_frame("the driver is gone"), 1 << 20)
    assert isinstance(frame, ErrorFrame) and frame.message == "the driver is gone"


def test_a_workers_line_past_the_frame_limit_ends_it_with_an_error_frame(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The actor holds what the worker writes until the driver takes it: a line longer
    than any frame is never read whole; the worker is killed and the daemon told."""
    import queue

    from jarvisd.cluster import _host
    from jarvisd.protocol import ErrorFrame, decode_line

    monkeypatch.setattr(_host, "MAX_LINE", 1001)
    writer = "import sys; sys.stdout.write('ok\\n' + 'x' * 5000); sys.stdout.flush()"
    proc = subprocess.Popen(
        [sys.executable, "-c", writer + "; import time; time.sleep(60)"], stdout=subprocess.PIPE
    )
    out: queue.Queue[bytes | None] = queue.Queue(16)
    with proc:
        _host.WorkerHost._pump(proc, out)
        assert proc.wait(10) != 0  # killed, not left to sleep
    first, error, end = out.get_nowait(), out.get_nowait(), out.get_nowait()
    assert first == b"ok\n" and end is None
    frame = decode_line(error or b"")
    assert isinstance(frame, ErrorFrame) and "more than" in frame.message


def test_doctor_reads_auto_as_select_engine_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """``auto`` with no Ollama answering is the embedded engine: the node is fine when the
    model is there (a new user's first `cluster doctor` said FAIL while tasks ran)."""
    from jarvisd.cluster._nodecheck import _engine_check

    from ..conftest import link_real_models

    link_real_models("smollm2-135m")
    monkeypatch.setenv("OLLAMA_HOST", "http://127.0.0.1:9")
    auto = parse_config({"engine": {"default": "auto", "model": "smollm2-135m"}})
    check = _engine_check(auto)
    assert check.ok, check
    assert check.detail.startswith("auto (no Ollama at http://127.0.0.1:9): embedded smollm2-135m")
    missing = parse_config({"engine": {"default": "auto", "model": "qwen2.5-coder-7b"}})
    assert not _engine_check(missing).ok  # a model this node does not have
    ollama = parse_config({"engine": {"default": "ollama"}})
    assert not _engine_check(ollama).ok  # asked for by name: no fallback
