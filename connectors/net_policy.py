"""Which addresses a workflow's HTTP request may reach.

By default only globally routable addresses: loopback, private, link-local,
shared (CGNAT), reserved, multicast, unspecified and cloud-metadata addresses
are refused. The check runs on the *resolved* address at connect time (see
`guarded_http`), so every spelling of a host (decimal `2130706433`, hex
`0x7f.1`, short `127.1`, IPv6-mapped `::ffff:127.0.0.1`, a name that resolves to
loopback) meets the same rule, and the connection goes to exactly the address
that was checked (no second DNS answer in between).

The allow-list opens exactly what it names:

- `"intranet.example"`: that host name (as written in the URL), any port;
- `"intranet.example:8443"` / `"127.0.0.1:8080"` / `"[::1]:8080"`: that host or
  address on that port only;
- `"10.0.0.0/8"`, `"127.0.0.1"`, `"::1"`: those addresses, any port.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from firstgate.connectors.errors import AddressRefusedError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Instance-metadata endpoints of the big clouds: named on their own in the error,
# since "link-local" alone does not tell an operator what was at stake.
CLOUD_METADATA = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "100.100.100.200", "fd00:ec2::254")
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# Prefixes that carry an IPv4 address in their low 32 bits, which Python's
# `is_global` does not look through: SIIT's IPv4-translated addresses and the
# deprecated IPv4-compatible ones (`::a00:1` reaches 10.0.0.1 on a host that
# still routes them).
_IPV4_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
# Never globally routable, though Python 3.11 calls them global: local-use
# NAT64 (RFC 8215: on such a network it translates to private IPv4) and the
# deprecated site-local block.
_LOCAL_ONLY = (ipaddress.ip_network("64:ff9b:1::/48"), ipaddress.ip_network("fec0::/10"))


class AllowEntryError(ValueError):
    """An allow-list entry that is neither a host, a host:port, an address nor a CIDR block."""


@dataclass(frozen=True, slots=True)
class AllowRule:
    host: str | None = None  # a host name, matched against the URL's host
    network: IPNetwork | None = None  # an address or block, matched against the resolved address
    port: int | None = None  # None: any port

    def opens(self, host: str, port: int, address: IPAddress) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.host is not None:
            return self.host == _normal_host(host)
        assert self.network is not None
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped  # the same endpoint as the IPv4 address it maps
        return address.version == self.network.version and address in self.network


def _normal_host(host: str) -> str:
    return host.strip().strip("[]").rstrip(".").lower()


def _port(text: str, entry: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise AllowEntryError(f"{entry!r}: the port must be a number from 1 to 65535")
    return int(text)


def parse_allow(entry: str) -> AllowRule:
    """One allow-list entry; raises AllowEntryError naming what is wrong."""
    text = entry.strip()
    if not text:
        raise AllowEntryError("an allow-list entry is empty")
    if "/" in text:
        try:
            return AllowRule(network=ipaddress.ip_network(text, strict=False))
        except ValueError as exc:
            raise AllowEntryError(f"{entry!r} is not a CIDR block: {exc}") from None
    port: int | None = None
    host = text
    if text.startswith("["):  # [v6]:port or [v6]
        inside, _, rest = text[1:].partition("]")
        host = inside
        if rest:
            if not rest.startswith(":"):
                raise AllowEntryError(f"{entry!r}: expected [address]:port")
            port = _port(rest[1:], entry)
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
        port = _port(port_text, entry)
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        name = _normal_host(host)
        if not name or any(c in name for c in " /\\@?#"):
            raise AllowEntryError(f"{entry!r} is not a host name") from None
        return AllowRule(host=name, port=port)
    return AllowRule(network=ipaddress.ip_network(address), port=port)


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, 6to4, Teredo, NAT64)."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in _NAT64 or address in _IPV4_TRANSLATED:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in _IPV4_COMPATIBLE and int(address) > 1:  # `::` and `::1` are themselves
        return ipaddress.IPv4Address(int(address))
    return None


def refusal_reason(address: IPAddress) -> str | None:
    """Why the default policy refuses `address` (None: globally routable)."""
    if address in CLOUD_METADATA:
        return "cloud-metadata"
    if isinstance(address, ipaddress.IPv6Address):
        inner = _embedded_ipv4(address)
        if inner is not None:
            return refusal_reason(inner)
        if any(address in block for block in _LOCAL_ONLY):
            return "private"
    if address.is_unspecified:
        return "unspecified"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if address.is_multicast:
        return "multicast"
    if address.is_private:
        return "private"
    if not address.is_global:
        return "reserved"
    return None


class NetworkPolicy:
    """The default refusals plus the operator's allow-list."""

    def __init__(self, allow: Iterable[str] = ()) -> None:
        self.rules = tuple(parse_allow(entry) for entry in allow)

    def check(self, host: str, port: int, address: str) -> None:
        """Raise AddressRefusedError unless `host:port`, resolved to `address`, may be reached."""
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # drop an IPv6 zone id
        reason = refusal_reason(ip)
        if reason is None:
            return
        if any(rule.opens(host, port, ip) for rule in self.rules):
            return
        raise AddressRefusedError(
            host=_normal_host(host),
            port=port,
            address=str(ip),
            reason=reason,
        )
