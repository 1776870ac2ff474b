"""A throwaway PostgreSQL server for the tests, from the Debian packages.

`python3 tests/pg_cluster.py start DIR` creates a cluster in DIR, starts it on
a free loopback port and prints its URL; `stop DIR` stops it. `.ci/run` uses
these two; the test fixture (`tests/conftest.py`) uses `start_cluster` /
`stop_cluster` itself when no URL is given. Standard library only: `.ci/run`
calls it before any virtualenv exists.

PostgreSQL refuses to run as root, so as root the server runs as the
`postgres` user that the Debian package creates.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

URL_FILE = "firstgate-url"


def _bin(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)
    if not candidates:
        raise RuntimeError(f"PostgreSQL's {name} is not installed (Debian package: postgresql)")
    return candidates[0]


def _as_server_user(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", "postgres", "--", *argv]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_cluster(directory: str | Path, timeout: float = 60.0) -> str:
    """Create and start a cluster in `directory`; return its URL (trust auth, loopback only)."""
    root = Path(directory).resolve()
    data = root / "data"
    root.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        server = pwd.getpwnam("postgres")
        os.chown(root, server.pw_uid, server.pw_gid)
    subprocess.run(
        _as_server_user(
            [_bin("initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"]
        ),
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        timeout=timeout,
    )
    port = _free_port()
    options = (
        f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={root} "
        "-c fsync=off -c max_connections=200"
    )
    subprocess.run(
        _as_server_user(
            [
                _bin("pg_ctl"),
                "-D",
                str(data),
                "-o",
                options,
                "-l",
                str(root / "log"),
                "-w",
                "-t",
                str(int(timeout)),
                "start",
            ]
        ),  # fmt: skip
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        timeout=timeout + 10,
    )
    url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    (root / URL_FILE).write_text(url)
    _wait_accepting(port, timeout)
    return url


def _wait_accepting(port: int, timeout: float) -> None:
    give_up = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return
        except OSError:
            if time.monotonic() > give_up:
                raise
            time.sleep(0.1)


def stop_cluster(directory: str | Path) -> None:
    data = Path(directory).resolve() / "data"
    if (data / "postmaster.pid").exists():
        subprocess.run(
            _as_server_user([_bin("pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]),
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=60,
        )


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        print("usage: pg_cluster.py start|stop DIR", file=sys.stderr)
        return 2
    command, directory = argv
    if command == "start":
        try:
            print(start_cluster(directory))
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            detail = getattr(exc, "stderr", b"") or b""
            print(
                f"cannot start PostgreSQL: {exc} {detail.decode(errors='replace')}", file=sys.stderr
            )
            return 1
        return 0
    stop_cluster(directory)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
