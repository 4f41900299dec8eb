"""This machine's addresses, read from its network interfaces; never from DNS or /etc/hosts.

getifaddrs(3) sees every address, secondary IPv4 addresses included. Where it cannot be called,
SIOCGIFADDR (one IPv4 address per interface) and /proc/net/if_inet6 stand in.
"""

from __future__ import annotations

import ctypes
import fcntl
import socket
import struct
import sys
from dataclasses import dataclass

_SIOCGIFADDR = 0x8915


@dataclass(frozen=True)
class LocalAddress:
    ifname: str
    """Interface name as getifaddrs reports it (an alias label like eth0:1 is kept)."""
    address: str
    """Canonical address text."""


def local_addresses() -> tuple[LocalAddress, ...]:
    """Every IPv4/IPv6 address on this machine's interfaces, in the kernel's order."""
    try:
        return _dedupe(_getifaddrs())
    except (OSError, AttributeError):
        return _dedupe(_ioctl_ipv4() + _proc_ipv6())


def _dedupe(found: list[LocalAddress]) -> tuple[LocalAddress, ...]:
    return tuple(dict.fromkeys(found))


class _IfAddrs(ctypes.Structure):
    pass


_IfAddrs._fields_ = [
    ("ifa_next", ctypes.POINTER(_IfAddrs)), ("ifa_name", ctypes.c_char_p), ("ifa_flags", ctypes.c_uint),
    ("ifa_addr", ctypes.c_void_p), ("ifa_netmask", ctypes.c_void_p), ("ifa_ifu", ctypes.c_void_p),
    ("ifa_data", ctypes.c_void_p),
]


def _getifaddrs() -> list[LocalAddress]:
    if not sys.platform.startswith("linux"):
        raise OSError("getifaddrs layout is only known for Linux here")
    libc = ctypes.CDLL(None, use_errno=True)  # the running process's libc (find_library would run ldconfig)
    head = ctypes.POINTER(_IfAddrs)()
    if libc.getifaddrs(ctypes.byref(head)) != 0:
        raise OSError(ctypes.get_errno(), "getifaddrs failed")
    try:
        found, node = [], head
        while node:
            entry = node.contents
            address = _sockaddr_text(entry.ifa_addr)
            if address:
                found.append(LocalAddress(entry.ifa_name.decode(errors="replace"), address))
            node = entry.ifa_next
        return found
    finally:
        libc.freeifaddrs(head)


def _sockaddr_text(pointer: int | None) -> str | None:
    """Linux sockaddr: u16 family, then sin_addr at offset 4 (IPv4) or sin6_addr at offset 8 (IPv6)."""
    if not pointer:
        return None
    family = ctypes.c_uint16.from_address(pointer).value
    if family == socket.AF_INET:
        return socket.inet_ntop(family, ctypes.string_at(pointer + 4, 4))
    if family == socket.AF_INET6:
        return socket.inet_ntop(family, ctypes.string_at(pointer + 8, 16))
    return None


def _ioctl_ipv4() -> list[LocalAddress]:
    found = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            try:
                packed = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:  # the interface has no IPv4 address
                continue
            found.append(LocalAddress(name, socket.inet_ntoa(packed[20:24])))
    return found


def _proc_ipv6(path: str = "/proc/net/if_inet6") -> list[LocalAddress]:
    """Lines: 32 hex digits of address, ifindex, prefix length, scope, flags, interface name."""
    try:
        with open(path, encoding="ascii") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        fields = line.split()
        if len(fields) == 6 and len(fields[0]) == 32:
            found.append(LocalAddress(fields[5], socket.inet_ntop(socket.AF_INET6, bytes.fromhex(fields[0]))))
    return found
