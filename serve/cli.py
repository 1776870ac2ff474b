"""The `firstgate` command: `serve` is handled here, everything else by the
runtime's CLI (`runtime/cli.py`).

`firstgate serve` runs under gevent, so the standard library is patched before
anything else is imported: this module imports nothing at the top that opens
sockets or starts threads.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def _patch_for_gevent() -> None:
    import contextlib

    # httpcore imports trio when it is installed; trio's epoll manager needs
    # select.epoll, which patching removes. Importing it first is harmless.
    with contextlib.suppress(ImportError):
        import trio  # noqa: F401
    from gevent import monkey

    monkey.patch_all()


def _serve_parser():  # type: ignore[no-untyped-def]
    import argparse

    parser = argparse.ArgumentParser(
        prog="firstgate serve",
        description="Serve Dify's Service API for every export in APPS_DIR, and the run console.",
    )
    parser.add_argument("apps_dir", metavar="APPS_DIR")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=5001)
    parser.add_argument("--models", "--settings", metavar="SETTINGS.yaml")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--state", metavar="DB", help="the SQLite state database")
    where.add_argument(
        "--database-url", metavar="URL", help="a PostgreSQL database: postgresql://..."
    )
    parser.add_argument("--uploads", metavar="DIR", help="where uploaded files are kept")
    parser.add_argument(
        "--grace",
        type=float,
        default=30.0,
        help="seconds runs in flight get to finish on SIGTERM before they are stopped",
    )
    parser.add_argument("--locale", help="language of messages (default: from LANG)")
    return parser


def serve_main(argv: Sequence[str]) -> int:
    _patch_for_gevent()
    import os
    from pathlib import Path

    import locales
    from locales.localized_error import LocalizedError
    from runtime.settings import load_settings
    from serve.server import ServeConfig, serve_forever

    args = _serve_parser().parse_args(list(argv))
    locale = locales.normalize_locale(args.locale) if args.locale else locales.locale_from_env()
    apps_dir = Path(args.apps_dir)
    if not apps_dir.is_dir():
        print(locales.t("serve.start.notADirectory", locale, dir=str(apps_dir)), file=sys.stderr)
        return 2
    try:
        settings = load_settings(args.models) if args.models else None
        config = ServeConfig(
            apps_dir=apps_dir,
            host=args.host,
            port=args.port,
            settings=settings,
            database=args.database_url or args.state,
            uploads_dir=Path(args.uploads) if args.uploads else None,
            grace=args.grace,
            locale=locale,
            # Seconds of silence before a `ping` event (Dify's 10); tests shorten it.
            ping_interval=float(os.environ.get("FIRSTGATE_SSE_PING_S", "10")),
        )
        return serve_forever(config)
    except LocalizedError as exc:
        print(exc.render(locale), file=sys.stderr)
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["serve"]:
        return serve_main(args[1:])
    from runtime.cli import main as runtime_main

    return runtime_main(args)


if __name__ == "__main__":
    sys.exit(main())
