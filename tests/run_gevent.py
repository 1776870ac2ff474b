"""Run pytest with gevent's monkey patching applied before anything else imports socket."""

from gevent import monkey

monkey.patch_all()

import sys  # noqa: E402

import pytest  # noqa: E402

if __name__ == "__main__":
    sys.exit(pytest.main(sys.argv[1:]))
