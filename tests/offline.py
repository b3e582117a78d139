"""Child processes with the network blocked: every Python process they start loads a guard.

`offline_env()` writes a `sitecustomize.py` that refuses and records any socket connection or
name lookup to a host other than this machine's loopback (the local Prefect test server stays
reachable), and puts it first on PYTHONPATH, so the command, the parser process it starts and
any other Python child all run guarded. The test then checks the record is empty: an attempt
swallowed by a library's own error handling still shows there.
"""

from __future__ import annotations

import os
from pathlib import Path

GUARD = """
import os
import socket

_RECORD = os.environ.get("DOC_INDEXER_NETWORK_RECORD")
_LOCAL = {"localhost", "127.0.0.1", "::1", "", None}


def _is_local(host):
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    return host in _LOCAL or str(host).startswith("127.")


def _refuse(what):
    if _RECORD:
        with open(_RECORD, "a", encoding="utf-8") as record:
            record.write(f"{os.getpid()} {what}\\n")
    raise OSError(f"network access attempted in an offline test: {what}")


_connect = socket.socket.connect
_connect_ex = socket.socket.connect_ex
_getaddrinfo = socket.getaddrinfo


def connect(self, address):
    if not isinstance(address, (str, bytes)) and not _is_local(address[0]):
        _refuse(f"connect {address!r}")
    return _connect(self, address)


def connect_ex(self, address):
    if not isinstance(address, (str, bytes)) and not _is_local(address[0]):
        _refuse(f"connect {address!r}")
    return _connect_ex(self, address)


def getaddrinfo(host, *args, **kwargs):
    if not _is_local(host):
        _refuse(f"getaddrinfo {host!r}")
    return _getaddrinfo(host, *args, **kwargs)


socket.socket.connect = connect
socket.socket.connect_ex = connect_ex
socket.getaddrinfo = getaddrinfo
"""


def offline_env(env: dict[str, str], folder: Path) -> tuple[dict[str, str], Path]:
    """`env` with the network guard for every Python child, and the file attempts go to."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(GUARD, "utf-8")
    record = folder / "network-attempts.txt"
    record.write_text("", "utf-8")
    path = os.pathsep.join(p for p in (str(folder), env.get("PYTHONPATH", "")) if p)
    return {**env, "PYTHONPATH": path, "DOC_INDEXER_NETWORK_RECORD": str(record)}, record
