"""A second, private Docker engine on TCP with TLS client certificates, for the remote
engine tests: its own CA, server and client certificates (openssl), its own state
directory, listening on a free loopback port, and the sandbox image copied into it from
the first engine. Stopped and removed when the tests are done."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TlsEngine", "start_tls_engine"]


@dataclass
class TlsEngine:
    address: str
    certs: Path  # ca.pem, cert.pem, key.pem: the client's
    state: Path
    process: subprocess.Popen[bytes]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        shutil.rmtree(self.state, ignore_errors=True)

    def cli(self, *args: str) -> list[str]:
        return [
            "docker", "--tlsverify", "-H", self.address,
            "--tlscacert", str(self.certs / "ca.pem"),
            "--tlscert", str(self.certs / "cert.pem"),
            "--tlskey", str(self.certs / "key.pem"),
            *args,
        ]  # fmt: skip


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(where: Path, name: str) -> None:
    """A CA (``name``-ca.pem, its key) in ``where``: EC keys, quick to make."""
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", f"{name}-ca-key.pem",
             cwd=where)  # fmt: skip
    _openssl("req", "-x509", "-new", "-key", f"{name}-ca-key.pem", "-out", f"{name}-ca.pem",
             "-days", "2", "-subj", f"/CN=jarvis-test-{name}", cwd=where)  # fmt: skip


def make_cert(where: Path, ca: str, out: str, usage: str, san: str = "") -> None:
    """``out``-cert.pem and ``out``-key.pem signed by CA ``ca`` in ``where``."""
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", f"{out}-key.pem",
             cwd=where)  # fmt: skip
    _openssl("req", "-new", "-key", f"{out}-key.pem", "-out", f"{out}.csr", "-subj",
             f"/CN={out}", cwd=where)  # fmt: skip
    ext = where / f"{out}.ext"
    ext.write_text(f"extendedKeyUsage={usage}\n" + (f"subjectAltName={san}\n" if san else ""))
    _openssl("x509", "-req", "-in", f"{out}.csr", "-CA", f"{ca}-ca.pem", "-CAkey",
             f"{ca}-ca-key.pem", "-CAcreateserial", "-out", f"{out}-cert.pem", "-days", "2",
             "-extfile", ext.name, cwd=where)  # fmt: skip


def client_dir(where: Path, ca: str, name: str) -> Path:
    """A directory as ``sandbox.docker_tls`` wants it: the CA, a client cert and key."""
    make_cert(where, ca, name, "clientAuth")
    out = where / name
    out.mkdir()
    shutil.copy(where / "engine-ca.pem", out / "ca.pem")  # the engine's CA, to check it
    shutil.copy(where / f"{name}-cert.pem", out / "cert.pem")
    shutil.copy(where / f"{name}-key.pem", out / "key.pem")
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_tls_engine(image: str, first_engine_env: dict[str, str]) -> TlsEngine:
    """Start the engine and copy ``image`` into it (from the engine ``first_engine_env``
    names)."""
    dockerd = shutil.which("dockerd") or "/usr/sbin/dockerd"
    # Root-only and short: containerd's socket path lives under the exec root.
    state = Path(tempfile.mkdtemp(prefix="jv-tls-", dir="/var/lib"))
    certs = state / "certs"
    certs.mkdir()
    make_ca(certs, "engine")
    make_cert(certs, "engine", "server", "serverAuth", "IP:127.0.0.1,DNS:localhost")
    client = client_dir(certs, "engine", "client")
    address = f"tcp://127.0.0.1:{_free_port()}"
    with open(state / "dockerd.log", "wb") as log:  # the daemon keeps its own copy
        process = subprocess.Popen(
            [dockerd, "--data-root", str(state / "root"), "--exec-root", str(state / "x"),
             "--pidfile", str(state / "pid"), "-H", address, "--tlsverify",
             "--tlscacert", str(certs / "engine-ca.pem"),
             "--tlscert", str(certs / "server-cert.pem"),
             "--tlskey", str(certs / "server-key.pem"),
             "--bridge=none", "--iptables=false", "--ip-forward=false", "--ip-masq=false",
             "--shutdown-timeout=2"],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    engine = TlsEngine(address, client, state, process)
    try:
        deadline = time.monotonic() + 60
        while subprocess.run(engine.cli("version"), capture_output=True).returncode:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    "the TLS engine did not start: "
                    + (state / "dockerd.log").read_text(errors="replace")[-2000:]
                )
            time.sleep(0.2)
        save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE,
                                env={**os.environ, **first_engine_env})  # fmt: skip
        load = subprocess.run(engine.cli("load", "-q"), stdin=save.stdout, capture_output=True)
        assert save.stdout is not None
        save.stdout.close()
        if save.wait(120) or load.returncode:
            raise RuntimeError(f"could not copy {image} into the TLS engine: {load.stderr!r}")
    except BaseException:
        engine.stop()
        raise
    return engine
