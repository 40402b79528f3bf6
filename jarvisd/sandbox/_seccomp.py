"""A seccomp filter for the bubblewrap backend, assembled here as classic BPF (bwrap
loads it from a descriptor with ``--seccomp FD``; it applies to the program and all
its children, with no_new_privs).

It refuses, with EPERM, the system calls Docker's default profile refuses that matter
for an escape or an attack on the host kernel: mounts and the new mount API, namespace
changes (``unshare``, ``setns``, ``clone`` with any CLONE_NEW* flag), ``ptrace`` and
cross-process memory access, keyrings, ``bpf``, ``perf_event_open``, ``userfaultfd``,
``io_uring``, kernel modules and kexec, handle-based opens (the "shocker" escape),
clock, swap, reboot, quota, accounting and host-name calls, and the terminal
injection ioctls (TIOCSTI, TIOCLINUX). ``clone3`` answers ENOSYS, so the C library
falls back to ``clone``, whose flags the filter can see. A call made through another
ABI (x32, or 32-bit calls on x86_64) ends the process: its numbers differ.

x86_64 and aarch64 only: elsewhere :func:`seccomp_program` raises SandboxUnavailable.
"""

from __future__ import annotations

import errno
import platform
import struct

from .._errors import SandboxUnavailable

__all__ = ["DENIED", "seccomp_program"]

#: Refused system calls: name -> (x86_64 number, aarch64 number or None).
DENIED: dict[str, tuple[int, int | None]] = {
    # mounts and the new mount API
    "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41), "chroot": (161, 51),
    "fsopen": (430, 430), "fsconfig": (431, 431), "fsmount": (432, 432), "fspick": (433, 433),
    "move_mount": (429, 429), "open_tree": (428, 428), "mount_setattr": (442, 442),
    # namespaces (clone's flags are checked apart)
    "unshare": (272, 97), "setns": (308, 268),
    # other processes' memory
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "kcmp": (312, 272),
    # kernel attack surface
    "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218),
    "bpf": (321, 280), "perf_event_open": (298, 241), "userfaultfd": (323, 282),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427), "fanotify_init": (300, 262),
    # modules, kexec, reboot
    "init_module": (175, 105), "finit_module": (313, 273), "delete_module": (176, 106),
    "kexec_load": (246, 104), "kexec_file_load": (320, 294), "reboot": (169, 142),
    "create_module": (174, None), "get_kernel_syms": (177, None), "query_module": (178, None),
    # files by handle: the "shocker" container escape
    "open_by_handle_at": (304, 265), "name_to_handle_at": (303, 264),
    # host-wide state
    "swapon": (167, 224), "swapoff": (168, 225), "acct": (163, 89),
    "settimeofday": (164, 170), "clock_settime": (227, 112), "clock_adjtime": (305, 266),
    "adjtimex": (159, 171), "quotactl": (179, 60), "quotactl_fd": (443, 443),
    "lookup_dcookie": (212, 18), "syslog": (103, 116), "vhangup": (153, 58),
    "sethostname": (170, 161), "setdomainname": (171, 162), "nfsservctl": (180, 42),
    "iopl": (172, None), "ioperm": (173, None), "uselib": (134, None), "_sysctl": (156, None),
}  # fmt: skip

# Checked apart: (x86_64, aarch64).
_CLONE = (56, 220)
_CLONE3 = (435, 435)
_IOCTL = (16, 29)

#: CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME
CLONE_NEW_MASK = (
    0x00020000
    | 0x02000000
    | 0x04000000
    | 0x08000000
    | 0x10000000
    | 0x20000000
    | 0x40000000
    | 0x00000080
)
_TIOCSTI = 0x5412
_TIOCLINUX = 0x541C

_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_X32_BIT = 0x40000000

# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]
# (little-endian: the low half of an argument comes first).
_NR, _ARCH, _ARG0, _ARG1 = 0, 4, 16, 24

# Classic BPF opcodes.
_LD_ABS = 0x00 | 0x00 | 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ = 0x05 | 0x10  # BPF_JMP | BPF_JEQ | BPF_K
_JGE = 0x05 | 0x30  # BPF_JMP | BPF_JGE | BPF_K
_JSET = 0x05 | 0x40  # BPF_JMP | BPF_JSET | BPF_K
_RET = 0x06  # BPF_RET | BPF_K

_ALLOW = 0x7FFF0000
_KILL_PROCESS = 0x80000000
_ERRNO = 0x00050000


def seccomp_program(machine: str | None = None) -> bytes:
    """The filter as bwrap's ``--seccomp`` reads it: an array of struct sock_filter."""
    machine = machine or platform.machine()
    if machine not in _AUDIT_ARCH:
        raise SandboxUnavailable(
            f"the bwrap backend has no seccomp filter for {machine} (x86_64 and aarch64 "
            'only): use sandbox.backend = "docker"'
        )
    col = 0 if machine == "x86_64" else 1
    denied = sorted({nr for nrs in DENIED.values() if (nr := nrs[col]) is not None})
    # Instructions with symbolic jump targets, resolved below.
    code: list[tuple[int, int | str, int | str, int]] = [
        (_LD_ABS, 0, 0, _ARCH),
        (_JEQ, 1, 0, _AUDIT_ARCH[machine]),
        (_RET, 0, 0, _KILL_PROCESS),
        (_LD_ABS, 0, 0, _NR),
    ]
    if machine == "x86_64":
        code.append((_JGE, "kill", 0, _X32_BIT))
    code += [(_JEQ, "deny", 0, nr) for nr in denied]
    code += [
        (_JEQ, "enosys", 0, _CLONE3[col]),
        (_JEQ, "clone", 0, _CLONE[col]),
        (_JEQ, "ioctl", 0, _IOCTL[col]),
        (_RET, 0, 0, _ALLOW),
    ]
    labels: dict[str, int] = {}
    labels["clone"] = len(code)
    code += [(_LD_ABS, 0, 0, _ARG0), (_JSET, "deny", 0, CLONE_NEW_MASK), (_RET, 0, 0, _ALLOW)]
    labels["ioctl"] = len(code)
    code += [
        (_LD_ABS, 0, 0, _ARG1),
        (_JEQ, "deny", 0, _TIOCSTI),
        (_JEQ, "deny", 0, _TIOCLINUX),
        (_RET, 0, 0, _ALLOW),
    ]
    labels["deny"] = len(code)
    code.append((_RET, 0, 0, _ERRNO | errno.EPERM))
    labels["enosys"] = len(code)
    code.append((_RET, 0, 0, _ERRNO | errno.ENOSYS))
    labels["kill"] = len(code)
    code.append((_RET, 0, 0, _KILL_PROCESS))

    def offset(target: int | str, at: int) -> int:
        if isinstance(target, int):
            return target
        jump = labels[target] - at - 1
        assert 0 <= jump <= 255, "a BPF jump is one byte"
        return jump

    return b"".join(
        struct.pack("=HBBI", op, offset(jt, i), offset(jf, i), k)
        for i, (op, jt, jf, k) in enumerate(code)
    )
