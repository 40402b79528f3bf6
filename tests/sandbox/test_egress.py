"""A run's network policy in the real sandbox, through the path a user takes:
``jarvis sandbox run --allow-net ...`` on the real engine, with the real egress proxy.

One container does it all (the CI budget): ``pip install`` from a PEP 503 index served
on the host (a tiny wheel built here) through the proxy with the index allowed, then the
escape battery, then pip again against a host that is not allowed, then HTTPS to a
stand-in upstream whose test CA only this container trusts (TLS end to end; a redirect
from it to a private address, another name in the TLS hello, another Host header in an
allowed tunnel: each refused). A second, plain run
checks the default: no --allow-net, no proxy, nothing mounted, no proxy variables.

Refusals that reach the proxy (a denied CONNECT, an IP literal, a host not allowed, a
program's own request naming the metadata address) are ``net_connect`` events, printed
by ``jarvis sandbox run`` as ``jarvis: net: REFUSED HOST:PORT``. Those the kernel
refuses (raw TCP and UDP, DNS, IPv6, a program that ignores the proxy variables) never
reach it: the sandbox has no route, and the test asserts the errno.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import http.server
import json
import os
import subprocess
import sys
import threading
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jarvisd._config import SandboxConfig
from jarvisd._events import Event, EventType
from jarvisd._runcontext import RunContext
from jarvisd.engines import ScriptedEngine
from jarvisd.sandbox._bwrap import bwrap_path
from jarvisd.traces import TraceStore
from tests.conftest import require

from .conftest import engine_problem
from .test_hostile_program import ask

IMAGE = os.environ.get("JARVIS_TEST_SANDBOX_IMAGE", SandboxConfig().image)
PACKAGE = "jarvis_tinypkg"


def _wheel(directory: Path) -> Path:
    """A pure-Python wheel of PACKAGE 0.1, built by hand (no build backend needed)."""
    dist = f"{PACKAGE}-0.1.dist-info"
    files = {
        f"{PACKAGE}/__init__.py": b"VALUE = 42\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: 0.1\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: jarvis-test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = directory / f"{PACKAGE}-0.1-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
    return path


@pytest.fixture
def index(tmp_path: Path) -> Iterator[int]:
    """A PEP 503 simple index with one project on the host's loopback; its port."""
    root = tmp_path / "index"
    project = root / "simple" / PACKAGE.replace("_", "-")
    project.mkdir(parents=True)
    wheel = _wheel(root)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    (root / "simple" / "index.html").write_text(f'<a href="{project.name}/">{project.name}</a>')
    (project / "index.html").write_text(
        f'<a href="../../{wheel.name}#sha256={digest}">{wheel.name}</a>'
    )

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(root))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


# Runs in the sandbox: pip through the proxy, then each escape; one JSON line at the end.
PROGRAM = r"""
import json, os, socket, subprocess, sys, urllib.request
port = int(sys.argv[1])
out = {}

def pip(index):
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-cache-dir", "--disable-pip-version-check",
         "--retries", "0", "--timeout", "30", "--target", "/tmp/site", "--index-url",
         f"http://{index}:{port}/simple/", "--trusted-host", index, "jarvis-tinypkg"],
        capture_output=True, text=True)
    return done.returncode, (done.stdout + done.stderr)[-3000:]

with_pip = sys.argv[2] == "pip"
if with_pip:
    code, text = pip("pypi.test")
    out["pip_allowed"] = [code, text]
    if code == 0:
        sys.path.insert(0, "/tmp/site")
        import jarvis_tinypkg
        out["imported"] = jarvis_tinypkg.VALUE

def errno_of(fn):
    try:
        fn()
        return "connected"
    except OSError as exc:
        return exc.errno or str(exc)

def tcp(host, port, family=socket.AF_INET):
    def go():
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(10)
            s.connect((host, port))
    return go

def udp(host, port):
    def go():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"x", (host, port))
    return go

# The kernel's refusals: there is no route out of the sandbox at all.
out["tcp_allowed_address"] = errno_of(tcp("127.0.0.1", port))   # its own loopback
out["tcp_outside"] = errno_of(tcp("10.0.0.1", port))
out["udp_outside"] = errno_of(udp("10.0.0.1", 53))
out["dns"] = errno_of(lambda: socket.getaddrinfo("pypi.test", port))
out["ipv6"] = errno_of(tcp("2001:db8::1", 443, socket.AF_INET6))
ifaces = [l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:]]
out["interfaces"] = ifaces

def fetch(url, proxies=None):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler(proxies)) \
        if proxies is not None else urllib.request.build_opener()
    try:
        with opener.open(url, timeout=30) as reply:
            return [reply.status, reply.read(200).decode("utf-8", "replace")]
    except urllib.error.HTTPError as exc:
        return [exc.code, exc.read(400).decode("utf-8", "replace")]
    except OSError as exc:
        return ["error", str(exc)]

# A program that ignores (unsets) the proxy variables: no route.
out["no_proxy_vars"] = fetch(f"http://pypi.test:{port}/simple/", proxies={})
def proxy(method, target, host):
    # Straight to the forwarder (NO_PROXY would keep urllib off it for 127.0.0.1).
    with socket.create_connection(("127.0.0.1", 3128), timeout=30) as s:
        s.sendall(f"{method} {target} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        return s.recv(400).decode("utf-8", "replace")

# Through the proxy: IP literals (the allowed host's address among them), the metadata
# address, a denied CONNECT; and an allowed one, which opens.
out["ip_literal"] = proxy("GET", f"http://127.0.0.1:{port}/simple/", f"127.0.0.1:{port}")
out["ip_literal_urllib"] = fetch(f"http://10.1.2.3:{port}/simple/")
out["metadata"] = fetch("http://169.254.169.254/latest/meta-data/")
out["connect_denied"] = proxy("CONNECT", "evil.test:443", "evil.test:443")
# A host name with a terminal escape in it: refused, and never raw on the host's terminal
# (the proxy refuses the request line; ``jarvis sandbox run`` escapes what it prints too).
out["connect_escape"] = proxy("CONNECT", "\x1b[2Jx.test:443", "x.test:443")
out["connect_allowed_tunnel"] = proxy("CONNECT", f"pypi.test:{port}", f"pypi.test:{port}")[:12]
# A name that resolves to loopback, allowed only by a wildcard: wildcards never reach it.
out["wildcard_to_loopback"] = fetch(f"http://mirror.corp.lan:{port}/simple/")
# A host not allowed: the refusal says what would allow it.
out["not_allowed"] = fetch(f"http://other.test:{port}/simple/")
if with_pip:
    out["pip_refused"] = list(pip("other.test"))

# HTTPS to a stand-in upstream with a test CA trusted here only: TLS runs end to end
# (the proxy holds no key and reads only the hello), and its checks hold inside.
if len(sys.argv) > 3:
    import ssl
    tls_port, ca = int(sys.argv[3]), sys.argv[4]
    base = f"https://upstream.test:{tls_port}"
    trusted = ssl.create_default_context(cafile=ca)
    def fetch_tls(url, context):
        try:
            with urllib.request.urlopen(url, timeout=30, context=context) as reply:
                return [reply.status, reply.read(200).decode("utf-8", "replace")]
        except urllib.error.HTTPError as exc:
            return [exc.code, exc.read(400).decode("utf-8", "replace")]
        except OSError as exc:
            return ["error", str(exc)]
    out["https"] = fetch_tls(f"{base}/hello", trusted)
    out["https_untrusted"] = fetch_tls(f"{base}/hello", ssl.create_default_context())
    # A redirect from the allowed host to a private address: the second request is refused.
    out["redirect"] = fetch_tls(f"{base}/redirect?to=http://10.9.8.7:{port}/x", trusted)
    def tunnel(target):
        s = socket.create_connection(("127.0.0.1", 3128), timeout=30)
        s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = s.recv(1)
            if not chunk:
                break
            head += chunk
        return s, head.decode("latin-1")
    # Another name in the TLS hello (the certificate is valid for it too: only the
    # proxy can stop it).
    s, head = tunnel(f"upstream.test:{tls_port}")
    try:
        with trusted.wrap_socket(s, server_hostname="other.test") as t:
            t.sendall(b"GET /hello HTTP/1.1\r\nHost: other.test\r\n\r\n")
            out["sni_mismatch"] = [head[:12], t.recv(200).decode("utf-8", "replace")]
    except OSError as exc:
        out["sni_mismatch"] = [head[:12], "error: " + str(exc)]
    # Another host's Host header inside an allowed plaintext tunnel.
    s, head = tunnel(f"pypi.test:{port}")
    with s:
        s.sendall(b"GET /simple/ HTTP/1.1\r\nHost: other.test\r\n\r\n")
        out["host_smuggle"] = [head[:12], s.recv(400).decode("utf-8", "replace")]
print(json.dumps(out))
"""


def _jarvis(
    tmp_path: Path, args: list[str], config: str = "", backend: str = "docker"
) -> subprocess.CompletedProcess[str]:
    file = tmp_path / "config.toml"
    file.write_text(
        f'[sandbox]\nbackend = "{backend}"\nimage = "{IMAGE}"\nmemory = "256m"\n{config}'
    )
    env = {**os.environ, "JARVIS_CONFIG": str(file)}
    return subprocess.run(
        [sys.executable, "-m", "jarvisd", "sandbox", "run", *args],
        capture_output=True, text=True, env=env, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip


CONFIG = (
    "[sandbox.network]\n"
    'hosts = { "pypi.test" = "127.0.0.1", "other.test" = "127.0.0.1", "upstream.test" = "127.0.0.1", '
    '"mirror.corp.lan" = "127.0.0.1" }\n'
    'deny = ["evil.test"]\n'
)


def _battery(
    tmp_path: Path, port: int, backend: str, with_pip: bool, tls: tuple[int, Path] | None = None
) -> None:
    allow, more, mount, config = f"pypi.test:{port},*.corp.lan:{port}", [], [], CONFIG
    if tls is not None:
        allow += f",upstream.test:{tls[0]}"
        more, mount = [str(tls[0]), str(tls[1])], ["--mount", str(tls[1].parent)]
        config = f'allowed_roots = ["{tls[1].parent}"]\n{CONFIG}'
    done = _jarvis(
        tmp_path,
        ["--allow-net", allow, *mount,
         "--", "python3", "-c", PROGRAM, str(port), "pip" if with_pip else "-", *more],
        config,
        backend,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    net = [line for line in done.stderr.splitlines() if line.startswith("jarvis: net: ")]

    if with_pip:  # the allowed index: pip installs from it, through the proxy
        assert "No module named pip" not in out["pip_allowed"][1], (
            f"the sandbox image {IMAGE} predates pip in it: rebuild it (`jarvis sandbox build`)"
        )
        assert out["pip_allowed"][0] == 0, out["pip_allowed"][1]
        assert out["imported"] == 42
    assert any(line.startswith(f"jarvis: net: allowed pypi.test:{port}") for line in net), net

    # The kernel's refusals (no route; they never reach the proxy).
    assert out["interfaces"] == ["lo"]
    assert out["tcp_allowed_address"] == 111  # ECONNREFUSED: the sandbox's own loopback
    assert out["tcp_outside"] == 101  # ENETUNREACH
    assert out["udp_outside"] == 101
    assert out["dns"] in (-2, -3, -5)  # EAI_NONAME / EAI_AGAIN / EAI_NODATA: no resolver
    assert out["ipv6"] in (99, 101)  # EADDRNOTAVAIL / ENETUNREACH
    assert out["no_proxy_vars"][0] == "error", out["no_proxy_vars"]

    # The proxy's refusals, each an event naming the host.
    assert out["ip_literal"].startswith("HTTP/1.1 403"), out["ip_literal"]
    assert out["ip_literal_urllib"][0] == 403, out["ip_literal_urllib"]
    assert out["metadata"][0] == 403, out["metadata"]
    assert out["connect_denied"].startswith("HTTP/1.1 403"), out["connect_denied"]
    assert "evil.test" in out["connect_denied"]
    assert out["connect_allowed_tunnel"].startswith("HTTP/1.1 200"), out
    assert out["wildcard_to_loopback"][0] == 403, out["wildcard_to_loopback"]
    assert "loopback" in out["wildcard_to_loopback"][1]
    assert out["not_allowed"][0] == 403
    assert f"--allow-net other.test:{port}" in out["not_allowed"][1], out["not_allowed"]
    if with_pip:
        assert out["pip_refused"][0] != 0
        assert "other.test" in out["pip_refused"][1]
    refused = " ".join(line for line in net if "REFUSED" in line)
    for target in (f"127.0.0.1:{port}", f"10.1.2.3:{port}", "169.254.169.254:80",
                   "evil.test:443", f"other.test:{port}", f"mirror.corp.lan:{port}"):  # fmt: skip
        assert target in refused, (target, net)
    # Nothing the kernel refused showed up at the proxy.
    assert "10.0.0.1:" not in " ".join(net) and "2001:db8" not in " ".join(net)
    assert out["connect_escape"].startswith("HTTP/1.1 4"), out["connect_escape"]
    assert "\x1b" not in done.stderr and "\\x1b" in done.stderr
    summary = done.stderr.splitlines()[-1]
    assert summary.startswith("jarvis: sandbox: network: "), done.stderr
    assert "refused (" in summary
    if tls is not None:
        assert out["https"] == [200, f"hello; Host=upstream.test:{tls[0]}"], out["https"]
        assert out["https_untrusted"][0] == "error", out["https_untrusted"]
        assert "CERTIFICATE_VERIFY_FAILED" in out["https_untrusted"][1]
        assert out["redirect"][0] == 403, out["redirect"]
        assert f"10.9.8.7:{port}" in refused
        assert out["sni_mismatch"][0].startswith("HTTP/1.1 200"), out["sni_mismatch"]
        assert out["sni_mismatch"][1].startswith("error"), out["sni_mismatch"]
        assert out["host_smuggle"][0].startswith("HTTP/1.1 200"), out["host_smuggle"]
        assert not out["host_smuggle"][1].startswith("HTTP/1.1 200"), out["host_smuggle"]
        assert "other.test" in out["host_smuggle"][1], out["host_smuggle"]
        tls_refusals = [line for line in net if f"REFUSED upstream.test:{tls[0]}" in line]
        smuggle_refusals = [line for line in net if f"REFUSED pypi.test:{port}" in line]
        assert tls_refusals and smuggle_refusals, net


@pytest.fixture
def tls_upstream(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """An HTTPS stand-in on the host's loopback, its certificate from a test CA made
    here (its file is mounted into the sandbox for the program to trust)."""
    from tests.netpolicy.conftest import _serve, make_ca

    made, trust = tmp_path / "ca", tmp_path / "trust"
    made.mkdir()
    trust.mkdir()
    ca = make_ca(made)
    # Only the CA's certificate is mounted (a mount holding *.pem is refused as a
    # likely secret; the server's key stays on the host).
    ca_file = trust / "test-ca.crt"
    ca_file.write_bytes(ca.ca_file.read_bytes())
    for upstream in _serve(ca.server):
        yield upstream.port, ca_file


@pytest.mark.usefixtures("engine")
def test_docker_pip_install_and_escape_battery(
    tmp_path: Path, index: int, tls_upstream: tuple[int, Path]
) -> None:
    _battery(tmp_path, index, "docker", with_pip=True, tls=tls_upstream)


def test_bwrap_escape_battery(tmp_path: Path, index: int) -> None:
    require(bwrap_path() is not None, "bubblewrap is not installed (apt-get install bubblewrap)")
    _battery(tmp_path, index, "bwrap", with_pip=False)


# The default: no proxy, nothing mounted, no proxy variables, no forwarder.
DEFAULT_PROGRAM = r"""
import json, os, socket
listening = socket.socket().connect_ex(("127.0.0.1", 3128))
print(json.dumps({
    "proxy_env": sorted(k for k in os.environ if "proxy" in k.lower() or k.startswith("GIT_C")),
    "mounted": os.path.exists("/opt/jarvis-net"),
    "forwarder": listening,
}))
"""


@pytest.mark.usefixtures("engine")
def test_no_allow_net_no_proxy(tmp_path: Path) -> None:
    done = _jarvis(tmp_path, ["--", "python3", "-c", DEFAULT_PROGRAM])
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out == {"proxy_env": [], "mounted": False, "forwarder": 111}
    assert "jarvis: net:" not in done.stderr and "network:" not in done.stderr


def test_a_sandboxed_agents_run_gets_the_proxy_and_its_events(
    roots: tuple[Path, Path], hostile: Callable[[str], None]
) -> None:
    """``--sandbox --allow-net``: the agent's container reaches the run's proxy (the
    runner, model-written code's parent, asks for a denied host), each connection is a
    net_connect event on the run's bus and in its trace, and the outcome sums them."""
    require(not engine_problem(), engine_problem())
    hostile("""
        import urllib.request
        send(EventFrame(type="agent_turn_start", data={"agent": "simple", "input": "hi"}))
        # The container started as root (the runner separates itself): the forwarder
        # the prelude left behind must not be root.
        PRELUDE = b"/opt/jarvis/jarvisd/sandbox/_prelude.py"
        uids = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                args = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\\0")
                if args[0].endswith(b"python3") and args[3:4] == [PRELUDE]:
                    status = open(f"/proc/{pid}/status").read().splitlines()
                    uids += [l.split()[1:] for l in status if l.startswith("Uid:")]
            except OSError:
                pass
        try:
            urllib.request.urlopen("http://evil.test/x", timeout=30)
            finish("reached")
        except urllib.error.HTTPError as exc:
            finish(f"{exc.code} {uids} {exc.read(300).decode()}")
    """)
    run = RunContext()
    events: list[Event] = []
    run.bus.subscribe(events.append, EventType.NET_CONNECT)
    outcome = ask(roots, ScriptedEngine([]), run, allow_net=("pypi.test",))
    assert outcome.ok, outcome.failure
    assert outcome.answer.startswith("403 [['10001', '10001', '10001', '10001']] ")
    assert "evil.test" in outcome.answer
    assert [(e.data["host"], e.data["allowed"]) for e in events] == [("evil.test", False)]
    assert outcome.metadata["network"]["line"] == "network: 1 connection, 1 refused (evil.test:80)"
    trace = TraceStore().get(TraceStore().list(1)[0].id)
    assert "net_connect" in [e["type"] for e in trace.events]


def test_an_external_agents_container_reaches_the_runs_proxy(tmp_path: Path) -> None:
    """An external agent's container (``start_in_sandbox``, which runs acp_forward
    for the gateway) also gets the egress forwarder when its run allows hosts: the
    scripted ACP agent, pointed at 127.0.0.1:3128, is answered by the run's proxy."""
    require(not engine_problem(), engine_problem())
    import asyncio

    from jarvisd._config import parse_config
    from jarvisd.external import converse
    from jarvisd.external._registry import AgentDefinition, GatewayAccess, Launch
    from jarvisd.external._sandbox import start_in_sandbox
    from jarvisd.external._workspace import Workspace
    from jarvisd.sandbox._netrun import RunNetwork, network_policy
    from jarvisd.sandbox._policy import SandboxPolicy
    from tests.external.conftest import make_client

    workspace, home = tmp_path / "ws", tmp_path / "home"
    for directory in (workspace, home):
        directory.mkdir()
        directory.chmod(0o777)
    config = parse_config({"sandbox": {"image": IMAGE, "allowed_roots": [f"{tmp_path}:rw"]}})
    agent = AgentDefinition(
        "fake", "scripted", needs_node=False,
        command=("python3", "-m", "jarvisd.testing.acp_agent", "gateway"),
    )  # fmt: skip

    def prepare(agent: AgentDefinition, where: Path, home: Path, access: GatewayAccess) -> Launch:
        # Its "gateway" request goes to the egress forwarder instead.
        env = {"HOME": str(home), "PYTHONPATH": "/opt/jarvis",
               "JARVIS_GATEWAY_URL": "http://127.0.0.1:3128", "JARVIS_GATEWAY_TOKEN": "t"}  # fmt: skip
        return Launch(agent.command, env)

    async def go() -> tuple[str, list[Any]]:
        events: list[Any] = []
        client, run, _, _ = make_client(workspace)
        access = GatewayAccess(f"unix:{home / 'gateway.sock'}", "t", "local")
        sandbox = SandboxPolicy.from_config(config)
        policy = network_policy(config, ("pypi.test",))
        async with RunNetwork(
            policy, uid=sandbox.uid, gid=sandbox.gid, publish=events.append
        ) as net:
            channel = await start_in_sandbox(
                agent, Path("."), home, access, Workspace(workspace), config, prepare,
                egress=net.socket_path,
            )  # fmt: skip
            await converse(channel, client, cwd=workspace, prompt="go", run=run)
        return client.answer_text(), events

    answer, events = asyncio.run(go())
    assert answer.startswith("HTTP/1.1 400 Bad Request | jarvis refused the request"), answer
    assert len(events) == 1 and not events[0].allowed
