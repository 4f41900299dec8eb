"""Train.dist_ips checks: every entry a literal IPv4 address, no blanks, no duplicates, no loopback across machines."""

from __future__ import annotations

import ipaddress
from typing import Sequence

from paddledist.errors import UserError

_EXAMPLE = "e.g. -o Train.dist_ips=10.0.0.1,10.0.0.2"


def normalise_ip(text: str) -> str:
    """The canonical text of an address (IPv6 compressed), or ValueError."""
    return str(ipaddress.ip_address(str(text).strip()))


def validate_dist_ips(entries: Sequence[object]) -> tuple[str, ...]:
    """Canonical addresses in rank order; a UserError names the first bad entry and how to fix it."""
    ips: list[str] = []
    for position, entry in enumerate(entries, start=1):
        ip = _check_entry(entry, position, multi=len(entries) > 1)
        if ip in ips:
            raise UserError(f"Train.dist_ips lists {ip} twice (entries {ips.index(ip) + 1} and {position}); "
                            "list each machine once, and give a machine several processes with Global.device")
        ips.append(ip)
    return tuple(ips)


def _check_entry(entry: object, position: int, multi: bool) -> str:
    text = "" if entry is None else str(entry).strip()
    where = f"Train.dist_ips entry {position}"
    if not text:
        raise UserError(f"{where} is empty; list one address per machine, {_EXAMPLE}")
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        raise UserError(f"{where} {text!r} is not an IP address; list addresses, not host names, {_EXAMPLE}") from None
    if ip.version == 6:
        raise UserError(f"{where} {text!r} is IPv6; paddle.distributed.launch supports IPv4 addresses only")
    if ip.is_unspecified or ip.is_multicast:
        raise UserError(f"{where} {text!r} is not a machine's address; use the address other machines reach it at")
    if multi and ip.is_loopback:
        raise UserError(f"{where} {text!r} is a loopback address, which other machines cannot reach; "
                        "use this machine's network address")
    return str(ip)
