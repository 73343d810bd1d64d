"""Where a webhook may be delivered: public HTTPS endpoints only, checked when registered and again when
connected to (a name that resolved to a public address at registration may resolve to 169.254.169.254 at
delivery: DNS rebinding).

On a deployed stage: `https`, no credentials in the URL, and every address the host resolves to global
(not loopback, private, link-local, shared, reserved, multicast or unspecified, in IPv4 or IPv6, nor an
IPv4 address mapped into IPv6). The local stack allows `http` and loopback too, for a receiver in a test.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

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


def check(url: str, *, allow_loopback: bool, resolver: Resolver = resolve) -> Target:
    """The URL's target, or ValueError saying why a webhook may not go there."""
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ValueError("url: must be an https:// URL")
    if parts.username is not None or parts.password is not None:
        raise ValueError("url: credentials in the URL are not taken (the signature authenticates us)")
    if parts.fragment:
        raise ValueError("url: a fragment is never sent; leave it out")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise ValueError(f"url: {exc}") from exc
    addresses = tuple(resolver(parts.hostname, port))
    if not addresses:
        raise ValueError(f"url: {parts.hostname} does not resolve")
    loopback = all(_is_loopback(a) for a in addresses)
    if parts.scheme == "http" and not (allow_loopback and loopback):
        raise ValueError("url: must be https (http only to a loopback receiver on the local stack)")
    for address in addresses:
        if not (_is_public(address) or (allow_loopback and _is_loopback(address))):
            raise ValueError(f"url: {parts.hostname} resolves to {address}, which is not a public address")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(parts.scheme, parts.hostname, port, path, addresses)


def _ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    ip = ipaddress.ip_address(address.split("%", 1)[0])  # an IPv6 scope id is not part of the address
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _is_public(address: str) -> bool:
    ip = _ip(address)
    return ip.is_global and not ip.is_multicast


def _is_loopback(address: str) -> bool:
    return _ip(address).is_loopback
