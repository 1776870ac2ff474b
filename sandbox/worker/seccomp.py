"""A seccomp-BPF system-call filter, assembled by hand with the standard library.

Stdlib only: this module runs inside the sandbox worker before any user code.

Two filters stack (the kernel runs both on every system call):

- `base_rules`, installed once by the worker process itself: no `socket` (so
  no network of any kind, including Unix sockets reachable by path such as a
  database's or Docker's; `socketpair` stays, it reaches nothing), no io_uring (its operations would bypass this very
  filter), no ptrace or cross-process memory access, no mounts, namespaces,
  kernel modules, keyrings, BPF, clock or host changes.
- `job_rules`, installed in each job's process after the fork: no new
  processes (`fork`, `vfork`, `clone` without CLONE_THREAD, `clone3`; threads
  stay allowed), signals only to itself, no raising its own resource limits,
  and for Python no `execve`. No descriptor owner either (`fcntl` F_SETOWN,
  F_SETOWN_EX, F_SETSIG; `ioctl` FIOSETOWN, SIOCSPGRP, FIOASYNC): with
  O_ASYNC the kernel itself signals a descriptor's owner, any pid, and only
  Landlock's signal scope (Linux 6.12, ABI 6) would stop that.

A denied call fails with EPERM (`clone3` with ENOSYS so that the C library
falls back to `clone`, whose flags the filter can read). System calls of a
foreign architecture (x32, 32-bit compat) kill the process.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct
from collections.abc import Iterable

# struct seccomp_data: int nr; u32 arch; u64 ip; u64 args[6]
_NR, _ARCH, _ARG0_LO, _ARG1_LO = 0, 4, 16, 24
_ARG2_LO, _ARG2_HI = 32, 36

_LD_W_ABS = 0x20
_JEQ = 0x15
_JGE = 0x35
_JSET = 0x45
_RET = 0x06

RET_ALLOW = 0x7FFF0000
RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_CLONE_THREAD = 0x00010000
# Commands that make the kernel send a signal on the caller's behalf, when data
# arrives on a descriptor: to whatever pid or group is named as its owner
# (F_SETOWN's ESRCH would also tell which pids exist), or which signal (F_SETSIG).
# The same numbers on x86_64 and aarch64 (asm-generic).
F_SETOWN, F_SETSIG, F_SETOWN_EX = 8, 10, 15
FIOSETOWN, SIOCSPGRP, FIOASYNC = 0x8901, 0x8902, 0x5452
SIGNAL_FCNTL = (F_SETOWN, F_SETSIG, F_SETOWN_EX)
SIGNAL_IOCTL = (FIOSETOWN, SIOCSPGRP, FIOASYNC)
_X32_SYSCALL_BIT = 0x40000000

# name: (x86_64, aarch64); None where the call does not exist on that architecture.
_NUMBERS: dict[str, tuple[int | None, int | None]] = {
    "socket": (41, 198),
    "socketpair": (53, 199),
    "fcntl": (72, 25),
    "ioctl": (16, 29),
    "clone": (56, 220),
    "fork": (57, None),
    "vfork": (58, None),
    "clone3": (435, 435),
    "execve": (59, 221),
    "execveat": (322, 281),
    "kill": (62, 129),
    "tkill": (200, 130),
    "tgkill": (234, 131),
    "rt_sigqueueinfo": (129, 138),
    "rt_tgsigqueueinfo": (297, 240),
    "pidfd_send_signal": (424, 424),
    "pidfd_getfd": (438, 438),
    "ptrace": (101, 117),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
    "process_madvise": (440, 440),
    "mount": (165, 40),
    "umount2": (166, 39),
    "pivot_root": (155, 41),
    "chroot": (161, 51),
    "unshare": (272, 97),
    "setns": (308, 268),
    "open_tree": (428, 428),
    "move_mount": (429, 429),
    "fsopen": (430, 430),
    "fsconfig": (431, 431),
    "fsmount": (432, 432),
    "fspick": (433, 433),
    "mount_setattr": (442, 442),
    "open_by_handle_at": (304, 265),
    "name_to_handle_at": (303, 264),
    "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427),
    "bpf": (321, 280),
    "perf_event_open": (298, 241),
    "userfaultfd": (323, 282),
    "fanotify_init": (300, 262),
    "keyctl": (250, 219),
    "add_key": (248, 217),
    "request_key": (249, 218),
    "kexec_load": (246, 104),
    "kexec_file_load": (320, 294),
    "init_module": (175, 105),
    "finit_module": (313, 273),
    "delete_module": (176, 106),
    "reboot": (169, 142),
    "swapon": (167, 224),
    "swapoff": (168, 225),
    "acct": (163, 89),
    "quotactl": (179, 60),
    "iopl": (172, None),
    "ioperm": (173, None),
    "settimeofday": (164, 170),
    "clock_settime": (227, 112),
    "clock_adjtime": (305, 266),
    "adjtimex": (159, 171),
    "sethostname": (170, 161),
    "setdomainname": (171, 162),
    "syslog": (103, 116),
    "personality": (135, 92),
    "sched_setscheduler": (144, 119),
    "sched_setattr": (314, 274),
    "setpriority": (141, 140),
    "setrlimit": (160, 164),
    "prlimit64": (302, 261),
}

_ARCHES = {"x86_64": (0xC000003E, 0), "aarch64": (0xC00000B7, 1)}

# socketpair(2) makes only a connected local pair (the worker hands one end of
# each to the runtime): nothing it could reach the network with.
_NETWORK = ("socket",)
_HOST = (
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "pidfd_getfd",
    "pidfd_send_signal", "rt_sigqueueinfo", "rt_tgsigqueueinfo",
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
    "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
    "open_by_handle_at", "name_to_handle_at",
    "bpf", "perf_event_open", "userfaultfd", "fanotify_init",
    "keyctl", "add_key", "request_key",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "reboot", "swapon", "swapoff", "acct", "quotactl", "iopl", "ioperm",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    "sethostname", "setdomainname", "syslog", "personality",
    "sched_setscheduler", "sched_setattr", "setpriority",
)  # fmt: skip


class SeccompUnavailable(OSError):
    """This machine cannot install the filter (architecture or kernel)."""


# A rule: (syscall name, action) or (syscall name, (condition, action)): the call
# is allowed when the condition holds, else gets the action. Conditions:
# "thread-only" (clone with CLONE_THREAD), "read-only" (third argument NULL),
# ("self-only", pid) (first argument is this process), ("not-command", commands)
# (the second argument is none of these).
Rule = tuple[str, object]


def errno_action(code: int) -> int:
    return _RET_ERRNO | (code & 0xFFFF)


def base_rules(network: bool) -> list[Rule]:
    rules: list[Rule] = [(name, errno_action(errno.EPERM)) for name in _HOST]
    if not network:
        rules += [(name, errno_action(errno.EPERM)) for name in _NETWORK]
    return rules


def job_rules(pid: int, allow_exec: bool) -> list[Rule]:
    deny = errno_action(errno.EPERM)
    rules: list[Rule] = [
        ("fork", deny),
        ("vfork", deny),
        ("clone3", errno_action(errno.ENOSYS)),
        ("clone", ("thread-only", deny)),
        ("kill", (("self-only", pid), deny)),
        ("tgkill", (("self-only", pid), deny)),
        ("tkill", deny),
        ("setrlimit", deny),
        ("prlimit64", ("read-only", deny)),  # getrlimit() is prlimit64(pid, res, NULL, old)
        ("fcntl", (("not-command", SIGNAL_FCNTL), deny)),
        ("ioctl", (("not-command", SIGNAL_IOCTL), deny)),
    ]
    if not allow_exec:
        rules += [("execve", deny), ("execveat", deny)]
    return rules


def _ins(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k & 0xFFFFFFFF)


def assemble(rules: Iterable[Rule], machine: str | None = None) -> bytes:
    """The BPF program for `rules` on this (or the named) architecture."""
    machine = machine or platform.machine()
    if machine not in _ARCHES:
        raise SeccompUnavailable(errno.ENOSYS, f"no seccomp table for {machine}")
    audit_arch, column = _ARCHES[machine]
    program = [
        _ins(_LD_W_ABS, _ARCH),
        _ins(_JEQ, audit_arch, 1, 0),
        _ins(_RET, RET_KILL_PROCESS),
        _ins(_LD_W_ABS, _NR),
    ]
    if machine == "x86_64":  # x32 calls carry a high bit; none of them is allowed
        program += [_ins(_JGE, _X32_SYSCALL_BIT, 0, 1), _ins(_RET, RET_KILL_PROCESS)]
    for name, action in rules:
        number = _NUMBERS[name][column]
        if number is None:
            continue
        if isinstance(action, int):
            program += [_ins(_JEQ, number, 0, 1), _ins(_RET, action)]
            continue
        condition, deny = action  # type: ignore[misc]
        block = _condition_block(condition, deny)
        # The block always returns, so after a miss the accumulator still holds nr.
        program += [_ins(_JEQ, number, 0, len(block)), *block]
    program.append(_ins(_RET, RET_ALLOW))
    return b"".join(program)


def _condition_block(condition: object, deny: int) -> list[bytes]:
    """Instructions that allow the call when `condition` holds, else return `deny`."""
    if condition == "thread-only":
        return [
            _ins(_LD_W_ABS, _ARG0_LO),
            _ins(_JSET, _CLONE_THREAD, 0, 1),
            _ins(_RET, RET_ALLOW),
            _ins(_RET, deny),
        ]
    if condition == "read-only":
        return [
            _ins(_LD_W_ABS, _ARG2_LO),
            _ins(_JEQ, 0, 0, 3),
            _ins(_LD_W_ABS, _ARG2_HI),
            _ins(_JEQ, 0, 0, 1),
            _ins(_RET, RET_ALLOW),
            _ins(_RET, deny),
        ]
    kind, value = condition  # type: ignore[misc]
    if kind == "self-only":  # the first argument must be this process
        return [
            _ins(_LD_W_ABS, _ARG0_LO),
            _ins(_JEQ, value, 0, 1),
            _ins(_RET, RET_ALLOW),
            _ins(_RET, deny),
        ]
    if kind == "not-command":
        # The kernel reads fcntl's and ioctl's command as an unsigned int, so the
        # low word alone decides: high bits set by the caller change nothing.
        commands = tuple(value)
        block = [_ins(_LD_W_ABS, _ARG1_LO)]
        for index, command in enumerate(commands):
            block.append(_ins(_JEQ, command, len(commands) - index, 0))  # to the deny
        return [*block, _ins(_RET, RET_ALLOW), _ins(_RET, deny)]
    raise ValueError(f"unknown seccomp condition {condition!r}")


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def no_new_privs() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")


def install(rules: Iterable[Rule]) -> None:
    """Install the filter on the calling thread (and everything it starts later)."""
    program = assemble(rules)
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    no_new_privs()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        code = ctypes.get_errno()
        raise SeccompUnavailable(code, f"seccomp filter refused: {errno.errorcode.get(code)}")
