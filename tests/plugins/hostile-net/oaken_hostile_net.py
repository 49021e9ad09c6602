"""Reaches for Oaken's servers: the database and Redis sockets, TCP and UDP on loopback, an abstract unix socket,
raw and netlink sockets, libc's socket() through ctypes, a client library from the Python installation's own
site-packages, and system calls of another ABI (x32, i386 `int 0x80`) that a filter for x86-64 might not see."""

from __future__ import annotations

import ctypes
import mmap
import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path

from oaken_plugin import Closed, Plugin, Service
from pydantic import Field

plugin = Plugin(name="dialer", version="0.1")


class DialIn(Closed):
    postgres_socket: str = Field(max_length=500)
    redis_socket: str = Field(max_length=500)
    site_packages: list[str] = Field(default_factory=list, max_length=5, description="Oaken's, to import from")


class Dialled(Closed):
    tried: dict[str, str]
    interfaces: list[str]


class Empty(Closed):
    pass


def attempt(what: Callable[[], object]) -> str:
    try:
        what()
    except BaseException as exc:
        return type(exc).__name__
    return "worked"


def _unix(path: str) -> None:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(1)
    client.connect(path)


def _libc_connect(path: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.socket(socket.AF_UNIX, socket.SOCK_STREAM, 0)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "socket")
    address = ctypes.create_string_buffer(110)
    ctypes.memmove(address, (1).to_bytes(2, sys.byteorder) + path.encode(), 2 + len(path))
    if libc.connect(fd, address, 110) < 0:
        raise OSError(ctypes.get_errno(), "connect")


def _socket_pair_out() -> None:
    # a pair of unix sockets is allowed (asyncio's loop needs one): it reaches nothing but itself
    left, right = socket.socketpair()
    left.sendall(b"x")
    if right.recv(1) != b"x":
        raise OSError("the pair does not even reach itself")
    left.connect("\0oaken")  # an abstract address, through a socket it already has


def _import_from(folders: list[str], name: str) -> None:
    sys.path[:0] = folders
    try:
        __import__(name)
    finally:
        del sys.path[: len(folders)]


def _base_site_packages() -> str:
    return str(next(Path(sys.base_prefix).glob("lib/python3*/site-packages")))


def _cffi_socket() -> None:
    sys.path.append(_base_site_packages())  # the Python installation the environment was made from is mounted
    import cffi  # type: ignore[import-untyped,import-not-found,unused-ignore]

    ffi = cffi.FFI()
    ffi.cdef("int socket(int, int, int);")
    libc = ffi.dlopen(None)
    if libc.socket(2, 1, 0) < 0:
        raise PermissionError("socket")


@plugin.operation(name="dial", summary="Connect to Oaken's servers.", input=DialIn, output=Dialled)
def dial(service: Service, data: DialIn) -> Dialled:
    tried = {
        "postgres socket": attempt(lambda: _unix(data.postgres_socket)),
        "redis socket": attempt(lambda: _unix(data.redis_socket)),
        "libc connect to postgres": attempt(lambda: _libc_connect(data.postgres_socket)),
        "tcp 127.0.0.1:5432": attempt(lambda: socket.create_connection(("127.0.0.1", 5432), timeout=1)),
        "tcp6 ::1:6379": attempt(lambda: socket.create_connection(("::1", 6379), timeout=1)),
        "udp": attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("10.0.0.1", 53))),
        "abstract unix socket": attempt(lambda: socket.socket(socket.AF_UNIX).bind("\0oaken-plugin")),
        "netlink": attempt(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)),
        "packet": attempt(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)),
        "inet socketpair": attempt(lambda: socket.socketpair(socket.AF_INET)),
        "unix socketpair, then out": attempt(_socket_pair_out),
        "cffi socket": attempt(_cffi_socket),
        "import psycopg": attempt(lambda: _import_from(data.site_packages, "psycopg")),
        "import redis": attempt(lambda: _import_from(data.site_packages, "redis")),
        "import django": attempt(lambda: _import_from(data.site_packages, "django")),
    }
    interfaces = [line.split(":")[0].strip() for line in Path("/proc/net/dev").read_text().splitlines()[2:]]
    # an interface that is up has addresses: loopback's ::1 shows in if_inet6, routes in route and fib_trie
    tried["addresses"] = str(len(Path("/proc/net/if_inet6").read_text().splitlines()))
    tried["routes"] = str(len(Path("/proc/net/route").read_text().splitlines()[1:]))
    return Dialled(tried=tried, interfaces=interfaces)


def _x32_socket() -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.syscall(0x40000000 | 41, 2, 1, 0))  # socket(), numbered for the x32 ABI


# i386's socket() through `int 0x80`: mov eax, 359; mov ebx, 2; mov ecx, 1; xor edx, edx; int 0x80; ret
_I386_SOCKET = bytes.fromhex("b867010000" + "bb02000000" + "b901000000" + "31d2" + "cd80" + "c3")


def _i386_socket() -> int:
    page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(_I386_SOCKET)
    address = ctypes.addressof(ctypes.c_char.from_buffer(page))
    return int(ctypes.CFUNCTYPE(ctypes.c_int)(address)())


@plugin.operation(name="x32", summary="socket() through the x32 ABI.", input=Empty, output=Dialled)
def x32(service: Service, data: Empty) -> Dialled:
    return Dialled(tried={"x32 socket": str(_x32_socket())}, interfaces=[])


@plugin.operation(name="i386", summary="socket() through int 0x80.", input=Empty, output=Dialled)
def i386(service: Service, data: Empty) -> Dialled:
    return Dialled(tried={"i386 socket": str(_i386_socket())}, interfaces=[])


@plugin.operation(name="pid", summary="Which process answers.", input=Empty, output=Dialled)
def pid(service: Service, data: Empty) -> Dialled:
    return Dialled(tried={"token": _TOKEN}, interfaces=[])


_TOKEN = os.urandom(8).hex()
