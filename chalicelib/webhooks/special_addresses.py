"""IANA's IPv4 and IPv6 special-purpose address registries: which blocks are not globally reachable.

The registries are kept in the repository as a dated snapshot of IANA's own CSV files (`iana/*.csv`
beside this module: each names its source and the date of the snapshot), rather than taken from Python's
`ipaddress.is_global`, whose lists are those of the interpreter's release (3.11's accepts 192.0.0.8,
192.88.99.0/24, 3fff::/20 and 5f00::/16, which the registries say are not globally reachable).

A block is globally reachable only where the registry says `True`: `False`, `N/A` (6to4, Teredo: whether
one is reachable depends on relays the registry does not know) and a blank (a block whose allocation was
terminated) all count as not. Where blocks nest, the most specific decides, as the registry's footnotes
say ("not usable unless by virtue of a more specific reservation"): 192.0.0.9/32 (True) inside
192.0.0.0/24 (False) is reachable, 192.0.0.8/32 (False) is not.
"""

from __future__ import annotations

import csv
import ipaddress
from dataclasses import dataclass
from functools import cache
from pathlib import Path

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
SNAPSHOT_DIR = Path(__file__).resolve().parent / "iana"
FILES = ("iana-ipv4-special-registry-1.csv", "iana-ipv6-special-registry-1.csv")


@dataclass(frozen=True)
class Block:
    network: IpNetwork
    name: str
    globally_reachable: bool


def _blocks_of(text: str) -> list[Block]:
    """The rows of one registry's CSV (IANA's columns; lines starting with `#` are the snapshot's notes)."""
    lines = [line for line in text.splitlines(keepends=True) if not line.startswith("#")]
    out = []
    for row in csv.DictReader(lines):
        reachable = row["Globally Reachable"].split("[")[0].strip() == "True"
        for cell in row["Address Block"].split(","):  # "192.0.0.170/32, 192.0.0.171/32"
            network = ipaddress.ip_network(cell.split("[")[0].strip())  # "192.0.0.0/24 [2]": a footnote
            out.append(Block(network, row["Name"], reachable))
    return out


@cache
def blocks() -> tuple[Block, ...]:
    """Every block of both registries, as the snapshot lists them."""
    return tuple(b for name in FILES for b in _blocks_of((SNAPSHOT_DIR / name).read_text(encoding="utf-8")))


def snapshot_dates() -> dict[str, str]:
    """{file: the date of its snapshot}, from each file's `# snapshot:` line."""
    dates = {}
    for name in FILES:
        for line in (SNAPSHOT_DIR / name).read_text(encoding="utf-8").splitlines():
            if line.startswith("# snapshot:"):
                dates[name] = line.removeprefix("# snapshot:").split()[0]
    return dates


def not_globally_reachable(ip: IpAddress) -> Block | None:
    """The registry block that makes `ip` not globally reachable (the most specific one holding it), or None
    if no block holds it or the most specific one is globally reachable."""
    holding = [b for b in blocks() if b.network.version == ip.version and ip in b.network]
    if not holding:
        return None
    decisive = max(holding, key=lambda b: b.network.prefixlen)
    return None if decisive.globally_reachable else decisive
