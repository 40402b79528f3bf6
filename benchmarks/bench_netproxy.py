"""Egress proxy cost: an HTTPS request through the proxy (CONNECT over its Unix socket,
the name resolved and checked, then TLS end to end) against the same request made
directly over loopback TCP, interleaved request by request; and a 100 MB HTTPS
download through the proxy against the same download direct.

Three processes, as in a run: the client (here), the proxy (a child process running
``EgressProxy`` on its own thread, as the daemon does) and a TLS upstream (another
child). The sandbox's in-container forwarder (TCP to the socket) is not in this path:
it is the sandbox's cost, the same for every destination.

    python -m benchmarks.bench_netproxy [--quick] [--out DIR]

writes ``DIR/netproxy.md`` and ``DIR/netproxy.json`` (default ``benchmarks/results``);
``python -m benchmarks.harness --only bench_netproxy`` runs it among the others.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from benchmarks.harness import ROOT, BenchEnv, Row, median, percentile, render_markdown

OVERHEAD_TARGET_MS = 5.0
THROUGHPUT_TARGET = 0.80
DOWNLOAD_BYTES = 100 * 1024 * 1024
HOST = "upstream.test"

_UPSTREAM = r"""
import ssl, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_GET(self):
        size = int(self.path.split("n=", 1)[1]) if "n=" in self.path else 5
        self.send_response(200)
        self.send_header("Content-Length", str(size))
        self.end_headers()
        block = b"x" * (1 << 20)
        while size > 0:
            self.wfile.write(block[: min(size, len(block))])
            size -= len(block)

server = ThreadingHTTPServer(("127.0.0.1", 0), H)
server.daemon_threads = True
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(sys.argv[1])
server.socket = context.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
"""

_PROXY = r"""
import sys
from jarvisd.netpolicy import EgressProxy, NetPolicy
policy = NetPolicy.parse(allow=[sys.argv[2]], hosts={"upstream.test": "127.0.0.1"})
with EgressProxy(policy, sys.argv[1]):
    print("ready", flush=True)
    sys.stdin.read()
"""


def _certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for HOST: (the server's PEM with key, the cert)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, HOST)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(HOST)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM)
    chain, ca = directory / "server.pem", directory / "ca.pem"
    chain.write_bytes(pem + key.private_bytes(serialization.Encoding.PEM,
                      serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))  # fmt: skip
    ca.write_bytes(pem)
    return chain, ca


@contextmanager
def _child(python: str, code: str, *args: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([python, "-c", code, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env)  # fmt: skip
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().strip()
        if not first:
            raise RuntimeError(f"a benchmark child did not start: {code[:60]!r}")
        yield proc, first
    finally:
        proc.kill()
        proc.wait(10)


def _read_response(tls: ssl.SSLSocket, sink: bytearray | None = None) -> int:
    """Reads one HTTP response with a Content-Length; returns its body's size."""
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = tls.recv(65536)
        if not chunk:
            raise RuntimeError("the upstream closed early")
        head += chunk
    head, _, body = head.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))  # fmt: skip
    got = len(body)
    buffer = bytearray(1 << 20)
    while got < length:
        n = tls.recv_into(buffer)
        if not n:
            raise RuntimeError("the upstream closed mid-body")
        got += n
    return got


def _direct(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port))


def _proxied(sock_path: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(sock_path)
    sock.sendall(f"CONNECT {HOST}:{port} HTTP/1.1\r\nHost: {HOST}:{port}\r\n\r\n".encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(4096)
        if not chunk:
            raise RuntimeError("the proxy closed the tunnel")
        answer += chunk
    if not answer.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(answer.decode(errors="replace"))
    return sock


def _request(context: ssl.SSLContext, open_socket: Callable[[], socket.socket], size: int) -> int:
    with context.wrap_socket(open_socket(), server_hostname=HOST) as tls:
        tls.sendall(
            f"GET /?n={size} HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n".encode()
        )
        return _read_response(tls)


def measure(env: BenchEnv) -> list[Row]:
    requests, warmups = env.runs(200, 40), env.warmups(5)
    downloads = env.runs(9, 2)
    size = DOWNLOAD_BYTES if not env.smoke else 1024 * 1024
    with tempfile.TemporaryDirectory(prefix="jv-bench-np-") as tmp:
        chain, ca = _certificate(Path(tmp))
        context = ssl.create_default_context(cafile=str(ca))
        sock_path = str(Path(tmp) / "egress.sock")
        with _child(env.python, _UPSTREAM, str(chain)) as (_, port_text):
            port = int(port_text)
            with _child(env.python, _PROXY, sock_path, f"{HOST}:{port}"):

                def direct() -> socket.socket:
                    return _direct(port)

                def proxied() -> socket.socket:
                    return _proxied(sock_path, port)

                base: list[float] = []
                ours: list[float] = []
                for i in range(warmups + requests):
                    for opener, sink in ((direct, base), (proxied, ours)):
                        start = time.perf_counter()
                        _request(context, opener, 5)
                        if i >= warmups:
                            sink.append((time.perf_counter() - start) * 1000)

                speeds: dict[str, list[float]] = {"direct": [], "proxy": []}
                for _ in range(downloads):
                    for key, opener in (("direct", direct), ("proxy", proxied)):
                        start = time.perf_counter()
                        got = _request(context, opener, size)
                        speeds[key].append(got / (time.perf_counter() - start) / 1e6)
    overhead = percentile([o - b for o, b in zip(ours, base, strict=True)], 50)
    # Medians of interleaved pairs: on a loaded 2-core machine the best of each
    # swings far more than the ratio of medians does.
    direct_speed, proxy_speed = median(speeds["direct"]), median(speeds["proxy"])
    share = proxy_speed / direct_speed
    best_share = max(speeds["proxy"]) / max(speeds["direct"])
    return [
        Row(
            "egress proxy: one HTTPS request, new connection each (p50)",
            percentile(ours, 50),
            "ms",
            baseline=percentile(base, 50),
            baseline_name="direct TCP + TLS on loopback",
            target=f"<= {OVERHEAD_TARGET_MS:.0f} ms more at p50",
            passed=overhead <= OVERHEAD_TARGET_MS,
            notes=f"+{overhead:.2f} ms at p50 (paired); p95 {percentile(ours, 95):.2f} vs "
            f"{percentile(base, 95):.2f} ms; {len(ours)} interleaved requests; CONNECT over "
            "the Unix socket, name checked, TLS handshake and a 5-byte GET",
            extra={"overhead_p50_ms": overhead},
        ),
        Row(
            f"egress proxy: {size // (1024 * 1024)} MB HTTPS download throughput",
            proxy_speed,
            "MB/s",
            baseline=direct_speed,
            baseline_name="direct TCP + TLS on loopback",
            target=f">= {THROUGHPUT_TARGET:.0%} of direct",
            passed=share >= THROUGHPUT_TARGET,
            notes=f"{share:.0%} of direct at the median of {downloads} interleaved downloads "
            f"each (best of each: {max(speeds['proxy']):.0f} vs {max(speeds['direct']):.0f} "
            f"MB/s, {best_share:.0%}); the relay is splice(2) on Linux; client, proxy and "
            "upstream are three processes on this machine's cores",
            extra={"share": share, "best_share": best_share},
        ),
    ]


def run(env: BenchEnv) -> list[Row]:
    return measure(env)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="fewer requests")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = measure(BenchEnv(sys.executable, out, quick=args.quick))
    meta = {
        "machine": f"{platform.machine()} {os.cpu_count()} cores, {platform.platform()}",
        "python": platform.python_version(),
        "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }
    (out / "netproxy.md").write_text(render_markdown(rows, meta))
    (out / "netproxy.json").write_text(
        json.dumps({"meta": meta, "rows": [asdict(r) | {"ratio": r.ratio} for r in rows]}, indent=2)
    )
    print((out / "netproxy.md").read_text())
    return 0 if all(r.passed is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
