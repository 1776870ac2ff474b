"""Run pytest with gevent's monkey patching applied before anything else imports socket."""

import contextlib

# httpcore imports trio when it is installed; trio's epoll manager needs
# select.epoll, which monkey-patching removes. Importing it first is harmless.
with contextlib.suppress(ImportError):
    import trio  # noqa: F401

from gevent import monkey  # noqa: E402

monkey.patch_all()

import sys  # noqa: E402

import pytest  # noqa: E402

if __name__ == "__main__":
    # anyio's pytest plugin would import trio's backends after patching.
    sys.exit(pytest.main(["-p", "no:anyio", *sys.argv[1:]]))
