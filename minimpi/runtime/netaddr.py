"""Which local address a rank's data plane should use when ranks span several hosts.

A host name may resolve to a loopback address on the host itself (Debian's 127.0.1.1, or a
``/etc/hosts`` line mapping the name to 127.0.0.1), so the name is never what a rank
advertises. Instead a rank listens on, and publishes, the source address of its route to the
coordinator: the interface through which the job's control traffic already flows, which is
therefore reachable from the other hosts in every ordinary set-up (:func:`route_source`).
``--iface NAME|CIDR`` (``MINIMPI_IFACE``) picks an interface by name or by network instead
(:func:`iface_address`), e.g. a fast interconnect next to the management network.

    route_source("10.1.2.3")        -> "10.1.2.7"   (the local end of the route; no packet sent)
    iface_address("eth1")           -> "192.168.5.7"
    iface_address("192.168.5.0/24") -> "192.168.5.7"
    interface_addresses()           -> [("lo", "127.0.0.1"), ("eth0", "10.1.2.7"), ...]

Linux only (``SIOCGIFCONF``), IPv4 for interface look-ups; route_source also does IPv6.
"""
from __future__ import annotations

import array
import fcntl
import ipaddress
import socket
import struct
from typing import List, Optional, Tuple

from ..errors import MinimpiError

__all__ = ["AddressError", "route_source", "interface_addresses", "iface_address",
           "is_loopback", "data_plane_address"]


class AddressError(MinimpiError):
    """An address, interface or network that cannot be used; the message says what was expected."""


def _resolve(host: str, port: int = 9) -> List[tuple]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise AddressError(f"cannot resolve host {host!r}: {exc}") from None
    # IPv4 first: every cluster network has it, and a v6 route may exist only on paper
    return sorted(infos, key=lambda info: info[0] != socket.AF_INET)


def route_source(host: str) -> str:
    """The local address the kernel would use as source to reach ``host``.

    A connected UDP socket makes the kernel pick the route without sending anything.
    """
    last = None
    for family, kind, proto, _, sockaddr in _resolve(host):
        try:
            with socket.socket(family, kind, proto) as s:
                s.connect(sockaddr)
                return s.getsockname()[0]
        except OSError as exc:
            last = exc
    raise AddressError(f"no route from this host to {host!r}: {last}")


_SIOCGIFCONF = 0x8912
_IFREQ_SIZE = 40          # struct ifreq on 64-bit Linux: 16-byte name + 24-byte union


def interface_addresses() -> List[Tuple[str, str]]:
    """(interface, IPv4 address) for every configured IPv4 address, in kernel order."""
    max_entries = 256
    buf = array.array("B", bytes(max_entries * _IFREQ_SIZE))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("iL", len(buf), buf.buffer_info()[0])
        length = struct.unpack("iL", fcntl.ioctl(s.fileno(), _SIOCGIFCONF, req))[0]
    raw = buf.tobytes()[:length]
    out = []
    for off in range(0, len(raw), _IFREQ_SIZE):
        name = raw[off:off + 16].split(b"\0", 1)[0].decode("ascii", "replace")
        addr = socket.inet_ntoa(raw[off + 20:off + 24])   # sockaddr_in: family, port, address
        out.append((name, addr))
    return out


def is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return address == "localhost"


def iface_address(spec: str) -> str:
    """The local IPv4 address named by ``spec``: an interface (``eth1``, ``ib0``), a network
    in CIDR notation (``10.2.0.0/16``), or one of this host's addresses itself."""
    spec = spec.strip()
    addrs = interface_addresses()
    known = ", ".join(f"{n}={a}" for n, a in addrs) or "none"
    if "/" in spec:
        try:
            net = ipaddress.ip_network(spec, strict=False)
        except ValueError as exc:
            raise AddressError(f"--iface {spec!r}: not a network ({exc}); expected an "
                               f"interface name or CIDR such as 10.0.0.0/8") from None
        for _, addr in addrs:
            if ipaddress.ip_address(addr) in net:
                return addr
        raise AddressError(f"--iface {spec}: no address of this host ({socket.gethostname()}) "
                           f"is in that network (addresses: {known})")
    try:
        ipaddress.ip_address(spec)
    except ValueError:
        pass
    else:
        if any(addr == spec for _, addr in addrs):
            return spec
        raise AddressError(f"--iface {spec}: not an address of this host "
                           f"({socket.gethostname()}; addresses: {known})")
    for name, addr in addrs:
        if name == spec or name.split(":", 1)[0] == spec:   # eth0:1 is an alias of eth0
            return addr
    raise AddressError(f"--iface {spec!r}: this host ({socket.gethostname()}) has no interface "
                       f"of that name with an IPv4 address (interfaces: {known}); expected an "
                       f"interface name, a CIDR network or an address")


def data_plane_address(coordinator_host: str, iface: Optional[str] = None,
                       bind: Optional[str] = None) -> str:
    """Where a rank should listen: ``bind`` if given, else ``iface``'s address, else the
    local end of the route to the coordinator."""
    if bind:
        return bind
    if iface:
        return iface_address(iface)
    return route_source(coordinator_host)
