"""Train.dist_ips checks: every entry an IPv4 address or a host name that resolves to one, no blanks, no
duplicates, no loopback across machines.

Names are resolved with getaddrinfo (AF_INET: /etc/hosts, DNS, whatever nsswitch says on this machine). Every
node resolves the whole list; the meeting compares the resolved lists, so a name that resolves differently on
two machines stops all of them with the name shown.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Optional, Sequence

from paddledist.errors import UserError

_EXAMPLE = "e.g. -o Train.dist_ips=10.0.0.1,10.0.0.2 or host names node1,node2"
_NO_NAME = {getattr(socket, n) for n in ("EAI_NONAME", "EAI_NODATA", "EAI_ADDRFAMILY", "EAI_FAIL", "EAI_AGAIN")
            if hasattr(socket, n)}


def normalise_ip(text: str) -> str:
    """The canonical text of an address (IPv6 compressed), or ValueError."""
    return str(ipaddress.ip_address(str(text).strip()))


def validate_dist_ips(entries: Sequence[object], key: str = "Train.dist_ips") -> tuple[str, ...]:
    """Addresses in rank order, host names resolved; a UserError names the first bad entry and how to fix it."""
    ips: list[str] = []
    names: list[str] = []
    for position, entry in enumerate(entries, start=1):
        text = "" if entry is None else str(entry).strip()
        ip = check_address(text, f"{key} entry {position}", multi=len(entries) > 1)
        if ip in ips:
            first = ips.index(ip)
            what = (f"{ip} twice" if names[first] == text else
                    f"{_shown(names[first], ip)} and {_shown(text, ip)}, the same machine,")
            raise UserError(f"{key} lists {what} (entries {first + 1} and {position}); list each machine once, "
                            "and give a machine several processes with Global.device")
        ips.append(ip)
        names.append(text)
    return tuple(ips)


def _shown(name: str, ip: str) -> str:
    return ip if name == ip else f"{name!r} ({ip})"


def check_address(text: str, where: str, multi: bool) -> str:
    """One machine's IPv4 address from an address or a host name; UserError naming `where` otherwise."""
    if not text:
        raise UserError(f"{where} is empty; list one address or host name per machine, {_EXAMPLE}")
    ip = ipaddress.ip_address(resolve(text, where))
    named = "" if str(ip) == text else f" (resolved from {text!r})"
    if ip.is_unspecified or ip.is_multicast:
        raise UserError(f"{where} {text!r}{named} is not a machine's address; use the address other machines "
                        "reach it at")
    if multi and ip.is_loopback:
        fix = ("fix that name in this machine's /etc/hosts or DNS (Debian maps the host name to 127.0.1.1)"
               if named else "use this machine's network address")
        raise UserError(f"{where} {text!r}{named} is a loopback address, which other machines cannot reach; {fix}")
    return str(ip)


def resolve(text: str, where: str) -> str:
    """IPv4 text of an address or host name; IPv6 is refused (paddle.distributed.launch speaks IPv4 only)."""
    literal = _literal(text)
    if literal is not None:
        if literal.version == 6:
            raise UserError(f"{where} {text!r} is IPv6; paddle.distributed.launch supports IPv4 addresses only")
        return str(literal)
    if text.replace(".", "").isdigit() or ":" in text or "/" in text or " " in text:
        raise UserError(f"{where} {text!r} is neither an IPv4 address nor a host name; {_EXAMPLE}")
    found = _lookup(text, socket.AF_INET)
    if found:
        return found[0]
    six = _lookup(text, socket.AF_INET6)
    if six:
        raise UserError(f"{where} host name {text!r} resolves only to IPv6 ({six[0]}) on this machine; "
                        "paddle.distributed.launch needs IPv4: give the name an IPv4 address or list the address")
    raise UserError(f"{where} host name {text!r} does not resolve on this machine; add it to /etc/hosts or DNS, "
                    f"or list its IPv4 address, {_EXAMPLE}")


def _literal(text: str) -> Optional[ipaddress._BaseAddress]:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _lookup(name: str, family: int) -> list[str]:
    """Addresses of `name` in the resolver's order (first = what a connect would use), [] when it has none."""
    try:
        infos = socket.getaddrinfo(name, None, family, socket.SOCK_STREAM)
    except socket.gaierror as e:
        if e.errno in _NO_NAME:
            return []
        raise UserError(f"resolving host name {name!r} failed: {e.strerror}") from None
    except UnicodeError:
        return []
    return list(dict.fromkeys(normalise_ip(info[4][0].split("%")[0]) for info in infos))
