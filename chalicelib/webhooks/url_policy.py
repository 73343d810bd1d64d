"""Where a webhook may be delivered: public HTTPS endpoints only, checked when registered and again when
connected to (a name that resolved to a public address at registration may resolve to 169.254.169.254 at
delivery: DNS rebinding).

On a deployed stage: `https`, no credentials in the URL, and every address the host resolves to global:
in no block IANA's special-purpose registries say is not globally reachable (a dated snapshot in the
repository: chalicelib.webhooks.special_addresses), not multicast or IPv6 site-local, nor an IPv6 address
that carries an IPv4 address which is not global (NAT64, IPv4-compatible, IPv4-translated), nor an IPv6
address outside 2000::/3, the only space IANA allocates for global unicast, unless the special-purpose
registry says its block is globally reachable (64:ff9b::/96, whose IPv4 address is checked). Where the
stage allows a receiver on this machine (`MOONSEND_WEBHOOK_ALLOW_LOOPBACK`, which no deployed stage sets),
`http` and loopback too.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from chalicelib.webhooks import special_addresses

Resolver = Callable[[str, int], list[str]]


def resolve(host: str, port: int) -> list[str]:
    """Every address `host` resolves to (A and AAAA)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise ValueError(f"url: {host} does not resolve ({exc})") from exc
    return sorted({str(info[4][0]) for info in infos})


@dataclass(frozen=True)
class Target:
    """A checked URL: where to connect (the addresses checked) and what to ask for."""

    scheme: str
    host: str
    port: int
    path: str  # with its query
    addresses: tuple[str, ...]


@dataclass(frozen=True)
class AddressPolicy:
    """Where this stage's webhooks may go: what `check` allows, and how names are resolved (tests resolve
    names to the addresses they mean). Built once, from the stage's settings, and passed to every unit that
    connects to or registers an endpoint."""

    allow_loopback: bool
    resolver: Resolver = resolve

    def check(self, url: str) -> Target:
        return check(url, allow_loopback=self.allow_loopback, resolver=self.resolver)


def check(url: str, *, allow_loopback: bool, resolver: Resolver = resolve) -> Target:
    """The URL's target, or ValueError saying why a webhook may not go there."""
    if not all("\x21" <= c <= "\x7e" for c in url):
        raise ValueError("url: only printable ASCII (percent-encode anything else; an IDN in its xn-- form)")
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ValueError("url: must be an https:// URL")
    if parts.username is not None or parts.password is not None:
        raise ValueError("url: credentials in the URL are not taken (the signature authenticates us)")
    if parts.fragment:
        raise ValueError("url: a fragment is never sent; leave it out")
    try:
        port = parts.port if parts.port is not None else (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise ValueError(f"url: {exc}") from exc
    if not 1 <= port <= 65535:
        raise ValueError("url: the port must be from 1 to 65535")
    addresses = tuple(resolver(parts.hostname, port))
    if not addresses:
        raise ValueError(f"url: {parts.hostname} does not resolve")
    loopback = all(_is_loopback(a) for a in addresses)
    if parts.scheme == "http" and not (allow_loopback and loopback):
        raise ValueError("url: must be https (http only to a loopback receiver, where the stage allows one)")
    for address in addresses:
        if not (_is_public(address) or (allow_loopback and _is_loopback(address))):
            raise ValueError(f"url: {parts.hostname} resolves to {address}, which is not a public address")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(parts.scheme, parts.hostname, port, path, addresses)


_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")  # RFC 2765's IPv4-translated: ::ffff:0:a.b.c.d
_SITE_LOCAL = ipaddress.ip_network("fec0::/10")
# IANA's IPv6 Address Space registry: global unicast is 2000::/3; the rest is reserved or unallocated (::/8
# holds the loopback, mapped, translated and compatible forms), so nothing outside it is delivered to unless
# the special-purpose registry says its block is globally reachable.
_GLOBAL_UNICAST = ipaddress.ip_network("2000::/3")


def _ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The address, or the IPv4 address an IPv6 one carries (mapped, 6to4, NAT64, translated, compatible): a
    route through it reaches that IPv4 address, which is what must be public."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 scope id is not part of the address
    if isinstance(ip, ipaddress.IPv4Address):
        return ip
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if any(ip in net for net in (*_NAT64, _TRANSLATED)) or (int(ip) >> 32 == 0 and int(ip) > 1):  # ::a.b.c.d
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def _is_public(address: str) -> bool:
    """Whether the address, and the IPv4 address it carries if it is an IPv6 one that does, are global: in
    no block IANA's special-purpose registries say is not globally reachable (chalicelib.webhooks.
    special_addresses, a dated snapshot), nor in one Python's `is_global` refuses (a second opinion),
    multicast or IPv6 site-local (which are in other registries)."""
    seen = ipaddress.ip_address(address.split("%", 1)[0])
    for ip in {seen, _ip(address)}:
        if special_addresses.not_globally_reachable(ip) is not None or ip.is_multicast or not ip.is_global:
            return False
        if isinstance(ip, ipaddress.IPv6Address) and (ip in _SITE_LOCAL or not _unicast_space(ip)):
            return False
    return True


def _unicast_space(ip: ipaddress.IPv6Address) -> bool:
    """In 2000::/3, or in a special-purpose block the registry says is globally reachable (64:ff9b::/96)."""
    if ip in _GLOBAL_UNICAST:
        return True
    holding = [b for b in special_addresses.blocks() if b.network.version == 6 and ip in b.network]
    return bool(holding) and max(holding, key=lambda b: b.network.prefixlen).globally_reachable


def _is_loopback(address: str) -> bool:
    return _ip(address).is_loopback
