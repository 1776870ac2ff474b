"""Clients for the outside world that nodes reach: guarded HTTP with its address
policy, knowledge backends (External Knowledge API, the local FTS5 index), MCP
servers and the built-in tools.

Layer: `nodes -> connectors -> locales`. Nothing here imports `nodes`,
`runtime` or `plugin_daemon_client`; every error is a `ConnectorError` with a
message key, so the node's retry and error strategy handle it like any other.
"""
