"""The bwrap backend's seccomp filter, loaded into a forked child of the test process:
the refused calls answer EPERM (clone3 ENOSYS), ordinary work still runs."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import re
from pathlib import Path

import pytest

from jarvisd.sandbox._seccomp import DENIED, seccomp_program
from tests.conftest import require

pytestmark = pytest.mark.skipif(
    platform.machine() not in ("x86_64", "aarch64"), reason="no filter for this architecture"
)

HEADERS = {
    "x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
    "aarch64": Path("/usr/include/asm-generic/unistd.h"),
}


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_numbers_match_the_kernel_headers(machine: str) -> None:
    header = HEADERS[machine]
    require(header.is_file(), f"{header} missing (apt-get install linux-libc-dev)")
    numbers = {
        m[1]: int(m[2])
        for m in re.finditer(r"#define __NR(?:3264)?_(\w+)\s+(\d+)", header.read_text())
    }
    col = 0 if machine == "x86_64" else 1
    for name, nrs in DENIED.items():
        assert numbers.get(name) == nrs[col], name


def _in_filtered_child(code: str) -> dict[str, object]:
    """Run ``code`` (which fills ``out``) in a forked child under the filter."""
    program = seccomp_program()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        out: dict[str, object] = {}
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            buf = ctypes.create_string_buffer(program, len(program))

            class Fprog(ctypes.Structure):
                _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

            fprog = Fprog(len(program) // 8, ctypes.addressof(buf))
            assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
            assert libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) == 0  # SECCOMP_MODE_FILTER
            exec(code, {"out": out, "libc": libc, "ctypes": ctypes, "os": os, "errno": errno})
        except BaseException as exc:
            out["error"] = repr(exc)
        os.write(write, json.dumps(out).encode())
        os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 65536):
        data += chunk
    os.close(read)
    os.waitpid(pid, 0)
    return dict(json.loads(data))


X86 = platform.machine() == "x86_64"
CLONE, IOCTL = (56, 16) if X86 else (220, 29)
PROBE = f"""
libc.syscall.restype = ctypes.c_long
def call(nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    e = ctypes.get_errno()
    if r == 0 and nr == {CLONE}:
        os._exit(0)  # a clone that went through: the child leaves at once
    return errno.errorcode.get(e, e) if r < 0 else "allowed"
nrs = {{k: v[{0 if X86 else 1}] for k, v in {dict(DENIED)!r}.items()}}
for name in ("mount", "umount2", "unshare", "setns", "ptrace", "keyctl", "add_key", "bpf",
             "perf_event_open", "userfaultfd", "open_by_handle_at", "process_vm_readv",
             "init_module", "kexec_load", "io_uring_setup", "fsopen", "open_tree"):
    out[name] = call(nrs[name], 0, 0, 0, 0, 0, 0)
out["unshare(CLONE_NEWUSER)"] = call(nrs["unshare"], 0x10000000)
out["clone(CLONE_NEWUSER)"] = call({CLONE}, 0x10000000 | 17, 0, 0, 0, 0)
out["clone3"] = call(435, 0, 0)
out["ioctl(TIOCSTI)"] = call({IOCTL}, 0, 0x5412, 0)
out["ioctl(TIOCSTI) with high bits"] = call({IOCTL}, 0, 0x100005412, 0)
import subprocess, threading
out["subprocess"] = subprocess.run(["echo", "ran"], capture_output=True, text=True).stdout
box = []
t = threading.Thread(target=lambda: box.append("ran")); t.start(); t.join()
out["thread"] = box
"""


def test_the_filter_refuses_escape_calls_and_lets_programs_run() -> None:
    out = _in_filtered_child(PROBE)
    assert "error" not in out, out
    refused = {k: v for k, v in out.items() if k not in ("clone3", "subprocess", "thread")}
    assert set(refused.values()) == {"EPERM"}, out
    assert out["clone3"] == "ENOSYS"  # the C library falls back to clone
    assert out["subprocess"] == "ran\n" and out["thread"] == ["ran"]


def test_unknown_architecture_is_refused_not_left_open() -> None:
    from jarvisd._errors import SandboxUnavailable

    with pytest.raises(SandboxUnavailable, match="no seccomp filter for riscv64"):
        seccomp_program("riscv64")
    assert len(seccomp_program("aarch64")) % 8 == 0
