"""Run llama.cpp's `llama-server` as a child process, or point at one already running.

    with LlamaServer(ctx_size=4096, parallel=2) as server:
        server.base_url   # "http://127.0.0.1:PORT/v1" (OpenAI-compatible)
        server.root_url   # "http://127.0.0.1:PORT"   (/health, /slots, /metrics)

The server listens on a free loopback port with `--metrics` and the slots
endpoint on. `start()` returns once `GET /health` answers 200 (it answers 503
while the model loads). `stop()` (and leaving the `with` block, also on
Ctrl-C or an error) sends SIGTERM to the server's process group, then SIGKILL
after a grace period.

No orphans: the server runs in its own session/process group (so a terminal's
Ctrl-C reaches only us, and we decide how it stops); an atexit hook and, when
nobody else handles them, SIGTERM/SIGHUP handlers stop every server still
running; and on Linux the child asks the kernel for SIGKILL when its parent
dies (PR_SET_PDEATHSIG), which covers `kill -9` of Python. PDEATHSIG is tied
to the *thread* that spawned the child, so it is only armed when `start()`
runs on the main OS thread; a server started from a worker thread relies on
the other two.

`FIRSTGATE_LOCAL_BASE_URL` names a server the user already runs; `local_server()`
then returns an `ExternalLlamaServer` that starts and stops nothing.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import errno
import http.client
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, Any, Self

from firstgate.runtime.models.local_model import (
    FETCH_HINT,
    ModelNotFoundError,
    find_llama_server,
    require_model,
)

ENV_LOCAL_BASE_URL = "FIRSTGATE_LOCAL_BASE_URL"
# The longest reply a started server writes (`--n-predict`; a request's
# max_tokens is capped at it). llama-server's own default is none: a tiny model
# caught in a loop, asked with no max_tokens (an app that sets none), generated
# until its context was full, and past it with context shift (ten minutes of a
# README example on a busy machine).
MAX_TOKENS = 2048

_PORT_ATTEMPTS = 5
_POLL_INTERVAL_S = 0.05
_LOG_TAIL_LINES = 25


class LlamaServerError(RuntimeError):
    """The local llama-server could not be started or stopped."""


class LlamaServerStartError(LlamaServerError):
    """llama-server exited during start-up, or never became healthy."""

    def __init__(
        self, message: str, *, returncode: int | None, log_tail: str, log_path: Path | None
    ) -> None:
        super().__init__(message)
        self.returncode = returncode
        self.log_tail = log_tail
        self.log_path = log_path


class LlamaServerStartTimeoutError(LlamaServerStartError):
    """llama-server was alive but /health did not answer 200 within the start timeout."""


class PortInUseError(LlamaServerStartError):
    """The requested port (or every port tried) was taken by another process."""


# --------------------------------------------------------------------------- helpers


def _host_for_url(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def normalize_base_url(url: str) -> tuple[str, str]:
    """`(root_url, base_url)` for a server URL given with or without `/v1`."""
    root = url.strip().rstrip("/")
    if not re.match(r"^https?://", root):
        raise ValueError(f"not an http(s) URL: {url!r}")
    if root.endswith("/v1"):
        root = root[: -len("/v1")]
    return root, root + "/v1"


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS considers free on `host` right now (another process may take it)."""
    with socket.socket(_family(host), socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_is_free(host: str, port: int) -> bool:
    """True if we could bind `port` (with SO_REUSEADDR, so TIME_WAIT does not count)."""
    with socket.socket(_family(host), socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            raise
        return True


def http_status(root_url: str, path: str = "/health", timeout: float = 1.0) -> int | None:
    """Status code of `GET root_url+path`, or None if nothing answered."""
    m = re.match(r"^(https?)://([^/]+)$", root_url)
    if m is None:
        raise ValueError(f"not a root URL: {root_url!r}")
    conn_cls = http.client.HTTPSConnection if m.group(1) == "https" else http.client.HTTPConnection
    conn = conn_cls(m.group(2), timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        resp.read()
        return resp.status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


@lru_cache(maxsize=8)
def _help_text(binary: str, mtime_ns: int) -> str:
    proc = subprocess.run(
        [binary, "--help"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=60,
        check=False,
    )
    return proc.stdout.decode("utf-8", "replace")


def server_supports(flag: str, binary: Path | None = None) -> bool:
    """True if `llama-server --help` lists `flag` (e.g. "--sse-ping-interval")."""
    path = binary or find_llama_server()
    text = _help_text(str(path), path.stat().st_mtime_ns)
    return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text) is not None


def _read_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            data = f.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


def _signal_group(pid: int, sig: signal.Signals) -> None:
    """Signal the process group led by `pid` (we start the server with setsid)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


_PR_SET_PDEATHSIG = 1


def _pdeathsig_preexec() -> Callable[[], None] | None:
    """A preexec_fn that makes the child get SIGKILL when this thread/process dies."""
    if not sys.platform.startswith("linux"):
        return None
    if threading.get_native_id() != os.getpid():  # not the main OS thread: see module doc
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before fork
    except (OSError, AttributeError):
        return None
    parent = os.getpid()
    sigkill = int(signal.SIGKILL)

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, sigkill, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), sigkill)

    return preexec


# --------------------------------------------------------------------------- last resort

_LIVE: set[LlamaServer] = set()  # strong refs: a dropped handle must still be stopped
_LIVE_LOCK = threading.Lock()
_HANDLERS_INSTALLED = False


def _kill_all_now() -> None:
    with _LIVE_LOCK:
        servers = list(_LIVE)
    for server in servers:
        server._kill_now()


def _stop_all() -> None:
    with _LIVE_LOCK:
        servers = list(_LIVE)
    for server in servers:
        with contextlib.suppress(Exception):
            server.stop()


def _on_fatal_signal(signum: int, frame: FrameType | None) -> None:
    _kill_all_now()
    # Then die the way the signal would have killed us without this handler.
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _install_last_resort() -> None:
    global _HANDLERS_INSTALLED
    if _HANDLERS_INSTALLED:
        return
    _HANDLERS_INSTALLED = True
    atexit.register(_stop_all)
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):
        with contextlib.suppress(ValueError, OSError):
            # Only where nobody else has a say: an app's own handler wins.
            if signal.getsignal(sig) is signal.SIG_DFL:
                signal.signal(sig, _on_fatal_signal)


# --------------------------------------------------------------------------- servers


@dataclass(frozen=True)
class ExternalLlamaServer:
    """A llama-server someone else runs: nothing is started or stopped."""

    root_url: str
    base_url: str
    is_external: bool = True
    pid: None = None

    @classmethod
    def from_url(cls, url: str) -> ExternalLlamaServer:
        root, base = normalize_base_url(url)
        return cls(root_url=root, base_url=base)

    def start(self) -> Self:
        return self

    def stop(self) -> None:
        return None

    def health(self, timeout: float = 1.0) -> int | None:
        return http_status(self.root_url, "/health", timeout)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class LlamaServer:
    """A `llama-server` child process on a loopback port; a context manager."""

    is_external = False

    def __init__(
        self,
        model: Path | None = None,
        *,
        binary: Path | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        ctx_size: int | None = None,
        parallel: int | None = None,
        sse_ping_interval: int | None = None,
        max_tokens: int | None = MAX_TOKENS,
        extra_args: Sequence[str] = (),
        start_timeout: float = 60.0,
        stop_grace: float = 5.0,
        die_with_parent: bool = True,
        env: dict[str, str] | None = None,
    ) -> None:
        """`model`/`binary` default to the cached model and the installed binary;
        a missing one raises ModelNotFoundError / LlamaServerNotFoundError on start.
        `port=None` picks a free port (retrying if another process wins the race);
        an explicit port that is taken raises PortInUseError."""
        self._model = model
        self._binary = binary
        self.host = host
        self.requested_port = port
        self.ctx_size = ctx_size
        self.parallel = parallel
        self.sse_ping_interval = sse_ping_interval
        self.max_tokens = max_tokens
        self.extra_args = list(extra_args)
        self.start_timeout = start_timeout
        self.stop_grace = stop_grace
        self.die_with_parent = die_with_parent
        self.env = env
        self.port: int | None = None
        self.start_seconds: float | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_dir: Path | None = None
        self._log_file: IO[bytes] | None = None

    # ---- public surface

    @staticmethod
    def external(url: str) -> ExternalLlamaServer:
        """A handle on a llama-server the user already runs (see `ExternalLlamaServer`)."""
        return ExternalLlamaServer.from_url(url)

    @property
    def root_url(self) -> str:
        if self.port is None:
            raise LlamaServerError("llama-server is not started")
        return f"http://{_host_for_url(self.host)}:{self.port}"

    @property
    def base_url(self) -> str:
        return self.root_url + "/v1"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def log_path(self) -> Path | None:
        return self._log_dir / "llama-server.log" if self._log_dir is not None else None

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        path = self.log_path
        return _read_tail(path, lines) if path is not None else ""

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def health(self, timeout: float = 1.0) -> int | None:
        return http_status(self.root_url, "/health", timeout)

    def command(self, port: int) -> list[str]:
        """The argv used to start the server on `port`."""
        binary = self._binary or find_llama_server()
        model = self._model or require_model()
        cmd = [str(binary), "--model", str(model), "--host", self.host, "--port", str(port)]
        cmd += ["--metrics", "--slots"]
        if self.ctx_size is not None:
            cmd += ["--ctx-size", str(self.ctx_size)]
        if self.parallel is not None:
            cmd += ["--parallel", str(self.parallel)]
        if self.sse_ping_interval is not None:
            cmd += ["--sse-ping-interval", str(self.sse_ping_interval)]
        if self.max_tokens is not None:
            cmd += ["--n-predict", str(self.max_tokens)]
        return cmd + self.extra_args

    def start(self) -> Self:
        if self._proc is not None:
            raise LlamaServerError("llama-server is already started")
        if self._binary is None:
            self._binary = find_llama_server()
        if self._model is None:
            self._model = require_model()
        elif not self._model.is_file():
            raise ModelNotFoundError(f"model file not found: {self._model}; {FETCH_HINT}")
        self._log_dir = Path(tempfile.mkdtemp(prefix="firstgate-llama-server-"))
        _install_last_resort()
        t0 = time.monotonic()
        try:
            self._start_with_retries()
        except BaseException:  # includes KeyboardInterrupt while waiting
            self._terminate()
            raise
        self.start_seconds = time.monotonic() - t0
        return self

    def stop(self) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after `stop_grace`); idempotent."""
        self._terminate()
        if self._log_dir is not None:
            shutil.rmtree(self._log_dir, ignore_errors=True)
            self._log_dir = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = self.root_url if self.port is not None else "not started"
        return f"<LlamaServer {where} pid={self.pid}>"

    # ---- internals

    def _start_with_retries(self) -> None:
        explicit = self.requested_port is not None
        attempts = 1 if explicit else _PORT_ATTEMPTS
        tried: list[int] = []
        for attempt in range(1, attempts + 1):
            port = self.requested_port if explicit else free_port(self.host)
            assert port is not None
            tried.append(port)
            if explicit and not port_is_free(self.host, port):
                raise PortInUseError(
                    f"port {port} on {self.host} is already in use; "
                    "pass port=None to let firstgate pick a free one",
                    returncode=None,
                    log_tail="",
                    log_path=None,
                )
            self.port = port
            self._spawn(port, attempt)
            if self._wait_healthy():
                return
            # The process exited during start-up. Was it because the port was taken?
            proc = self._proc
            assert proc is not None
            returncode = proc.returncode
            self._close_log()
            self._proc = None
            if not port_is_free(self.host, port):
                if attempt < attempts:
                    continue
                raise PortInUseError(
                    f"llama-server could not bind {self.host} (ports tried: {tried}); "
                    f"log {self.log_path}:\n{self.log_tail()}",
                    returncode=returncode,
                    log_tail=self.log_tail(),
                    log_path=self.log_path,
                )
            self._raise_died(returncode)

    def _spawn(self, port: int, attempt: int) -> None:
        cmd = self.command(port)
        log_path = self.log_path
        assert log_path is not None
        self._log_file = log_path.open("ab")
        self._log_file.write(f"--- attempt {attempt}: {' '.join(cmd)}\n".encode())
        self._log_file.flush()
        preexec = _pdeathsig_preexec() if self.die_with_parent else None
        env = {**os.environ, **self.env} if self.env else None
        self._proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=preexec,
            close_fds=True,
            env=env,
        )
        with _LIVE_LOCK:
            _LIVE.add(self)

    def _wait_healthy(self) -> bool:
        """True once /health is 200; False if the process exited; raises on timeout."""
        proc = self._proc
        assert proc is not None
        deadline = time.monotonic() + self.start_timeout
        while True:
            if proc.poll() is not None:
                return False
            remaining = deadline - time.monotonic()
            status = http_status(self.root_url, "/health", timeout=max(0.05, min(1.0, remaining)))
            if status == 200 and proc.poll() is None:
                return True
            if time.monotonic() >= deadline:
                raise LlamaServerStartTimeoutError(
                    f"llama-server did not become healthy within {self.start_timeout:g} s "
                    f"(last /health: {status}); raise start_timeout for slow disks. "
                    f"Log {self.log_path}:\n{self.log_tail()}",
                    returncode=None,
                    log_tail=self.log_tail(),
                    log_path=self.log_path,
                )
            time.sleep(_POLL_INTERVAL_S)

    def _raise_died(self, returncode: int | None) -> None:
        tail = self.log_tail()
        raise LlamaServerStartError(
            f"llama-server exited during start-up (exit code {returncode}); "
            f"last lines of {self.log_path}:\n{tail}",
            returncode=returncode,
            log_tail=tail,
            log_path=self.log_path,
        )

    def _terminate(self) -> None:
        proc = self._proc
        if proc is not None:
            try:
                if proc.poll() is None:
                    _signal_group(proc.pid, signal.SIGTERM)
                    try:
                        proc.wait(self.stop_grace)
                    except subprocess.TimeoutExpired:
                        _signal_group(proc.pid, signal.SIGKILL)
                        proc.wait(self.stop_grace)
            finally:
                # Ctrl-C while waiting above must not leave the server behind.
                if proc.poll() is None:
                    _signal_group(proc.pid, signal.SIGKILL)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(1.0)
                self._proc = None
        with _LIVE_LOCK:
            _LIVE.discard(self)
        self._close_log()

    def _kill_now(self) -> None:
        """Last resort (signal handler): SIGKILL the group without waiting or locking."""
        proc = self._proc
        if proc is not None and proc.returncode is None:
            _signal_group(proc.pid, signal.SIGKILL)

    def _close_log(self) -> None:
        if self._log_file is not None:
            with contextlib.suppress(OSError):
                self._log_file.close()
            self._log_file = None


LocalServer = LlamaServer | ExternalLlamaServer


def local_server(**kwargs: Any) -> LocalServer:
    """`ExternalLlamaServer` if FIRSTGATE_LOCAL_BASE_URL is set, else `LlamaServer(**kwargs)`."""
    url = os.environ.get(ENV_LOCAL_BASE_URL, "").strip()
    if url:
        return ExternalLlamaServer.from_url(url)
    return LlamaServer(**kwargs)
