"""Landlock (Linux 5.13+): an unprivileged file-system allow-list for this process.

Stdlib only: runs inside the sandbox worker before any user code.

After `restrict(...)` the process (and every process it starts) may read and
execute only beneath the given read-only paths, read and write only beneath
the given writable paths, and nothing else: not /proc (so not another
process's environment or memory), not the user's home, not /tmp at large.
From ABI 4 on, TCP bind/connect are refused as well when the network is off;
from ABI 6 on, signals and abstract Unix sockets are scoped to the sandbox.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
from collections.abc import Iterable

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446  # same on x86_64 and aarch64
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1

EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
_ABI1_ALL = (1 << 13) - 1  # through MAKE_SYM
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5
_FILE_ONLY = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV

NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1

READ_ONLY = EXECUTE | READ_FILE | READ_DIR


class LandlockUnavailable(OSError):
    """The kernel has no Landlock (or it is disabled, or blocked by a container)."""


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def abi_version() -> int:
    """The Landlock ABI this kernel offers; 0 when there is none."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "aarch64"):
        return 0
    version = _libc().syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), _CREATE_RULESET_VERSION)
    return max(int(version), 0)


def handled_fs(abi: int) -> int:
    access = _ABI1_ALL
    if abi >= 2:
        access |= REFER
    if abi >= 3:
        access |= TRUNCATE
    if abi >= 5:
        access |= IOCTL_DEV
    return access


def restrict(
    read_only: Iterable[str],
    writable: Iterable[str],
    *,
    network: bool,
    max_abi: int | None = None,
) -> dict[str, int]:
    """Confine this process for good; returns what was enforced (for the report).

    Paths that do not exist are skipped. Needs no_new_privs (set by the caller).
    Each call adds a layer: access must pass every layer, so a later call can
    only narrow what an earlier one allowed. `max_abi` uses no feature newer
    than that ABI, as an older kernel would (tests emulate one with it).
    """
    kernel = abi_version()
    abi = kernel if max_abi is None else min(kernel, max_abi)
    if abi < 1:
        raise LandlockUnavailable(38, "Landlock is not available on this kernel")
    libc = _libc()
    fs = handled_fs(abi)
    net = NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 and not network else 0
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0
    if abi >= 6:
        attr = struct.pack("QQQ", fs, net, scoped)
    elif abi >= 4:
        attr = struct.pack("QQ", fs, net)
    else:
        attr = struct.pack("Q", fs)
    buffer = ctypes.create_string_buffer(attr, len(attr))
    ruleset = libc.syscall(_CREATE_RULESET, buffer, ctypes.c_size_t(len(attr)), 0)
    if ruleset < 0:
        raise LandlockUnavailable(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        for path in read_only:
            _allow(libc, ruleset, path, READ_ONLY & fs)
        for path in writable:
            _allow(libc, ruleset, path, fs)
        if libc.syscall(_RESTRICT_SELF, ruleset, 0) != 0:
            raise LandlockUnavailable(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)
    return {
        "abi": abi,
        "kernel_abi": kernel,
        "network": int(bool(net)),
        "scoped": int(bool(scoped)),
    }


def _allow(libc: ctypes.CDLL, ruleset: int, path: str, access: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if not os.path.isdir(path):
            access &= _FILE_ONLY
        rule = struct.pack("=Qi", access, fd)  # packed: u64 allowed_access, s32 parent_fd
        buffer = ctypes.create_string_buffer(rule, len(rule))
        if libc.syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, buffer, 0) != 0:
            raise LandlockUnavailable(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
    finally:
        os.close(fd)
