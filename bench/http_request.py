"""The http-request node's overhead: `firstgate.nodes.http_request.run` (template
rendering, the guarded client: policy check at connect, deadline, size caps)
against a raw `httpx.Client.get` of the same loopback server, alternated in
the same run.

    python -m bench.http_request [--requests=500] [--gevent]
"""

from __future__ import annotations

from bench.common import patch_gevent_if_asked

patch_gevent_if_asked()

import argparse  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer  # noqa: E402

from bench.common import header, line, ms, percentile, ratio  # noqa: E402


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        # One write: headers and body in separate segments would meet the
        # client's delayed ACK (40 ms) and measure that instead.
        body = b'{"ok": true}'
        self.wfile.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            + b"Content-Length: %d\r\n\r\n" % len(body)
            + body
        )

    def log_message(self, *args: object) -> None:
        return None


class _NoVariables:
    def get(self, selector: object) -> None:
        return None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--gevent", action="store_true")
    args = parser.parse_args()
    import httpx
    from firstgate.common.cancel import CancelToken
    from firstgate.connectors.hub import Connectors
    from firstgate.nodes import http_request
    from firstgate.nodes.base import NodeContext
    from firstgate.runtime.settings import RuntimeSettings

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/x"
    settings = RuntimeSettings.model_validate({"http_request": {"allow": ["127.0.0.1"]}})
    connectors = Connectors.from_settings(settings)
    data = http_request.Data.model_validate(
        {"type": "http-request", "method": "get", "url": url, "headers": "Accept: */*"}
    )
    ctx = NodeContext(
        node_id="h",
        attempt=1,
        variables=_NoVariables(),
        cancel=CancelToken(),
        connectors=connectors,
    )
    raw = httpx.Client(trust_env=False)
    header(f"http-request node overhead, {args.requests} GETs to a loopback server")
    for _ in range(20):  # warm both connection pools
        http_request.run(data, ctx)
        raw.get(url, headers={"Accept": "*/*"})
    ours, base = [], []
    for _ in range(args.requests):
        started = time.perf_counter()
        http_request.run(data, ctx)
        ours.append(time.perf_counter() - started)
        started = time.perf_counter()
        _ = raw.get(url, headers={"Accept": "*/*"}).text  # decode, as the node does
        base.append(time.perf_counter() - started)
    p50, b50 = percentile(ours, 50), percentile(base, 50)
    line(f"node p50 {ms(p50)}, p99 {ms(percentile(ours, 99))}")
    line(f"raw httpx p50 {ms(b50)}, p99 {ms(percentile(base, 99))}")
    line(f"overhead p50 {ms(p50 - b50)}; ratio to raw httpx: {ratio(p50, b50)}")
    raw.close()
    connectors.close()
    server.shutdown()


if __name__ == "__main__":
    main()
