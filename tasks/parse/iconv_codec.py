"""EUC-TW, which Python has no codec for, through the C library's iconv (glibc ships it).

`register()` adds a codec named `euc_tw` (also `euc-tw`, `x-euc-tw`) when the C library's
iconv knows EUC-TW, so that `data.decode("euc_tw")` works like any other codec: strict, a
UnicodeDecodeError at the first byte that is not EUC-TW. Where iconv lacks it (a C library
without glibc's conversion modules), no codec is registered and EUC-TW files that declare
nothing fail as not_a_text_document instead of being guessed as something else.
"""

from __future__ import annotations

import codecs
import ctypes
import ctypes.util
import errno
from functools import cache
from typing import Any

ICONV_NAME = "EUC-TW"
CODEC_NAME = "euc_tw"
_LABELS = {"euc_tw", "euc-tw", "x-euc-tw", "euctw", "cns11643"}
_FAILED = ctypes.c_void_p(-1).value


@cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        libc.iconv_open.restype = ctypes.c_void_p
        libc.iconv_open.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        libc.iconv.restype = ctypes.c_size_t
        libc.iconv.argtypes = [
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.POINTER(ctypes.c_size_t),
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.POINTER(ctypes.c_size_t),
        ]
        libc.iconv_close.argtypes = [ctypes.c_void_p]
    except (OSError, AttributeError):
        return None
    return libc


def _convert(data: bytes, source: str, target: str) -> tuple[bytes, int]:
    """(converted bytes, -1) or (bytes converted so far, offset of the first bad input byte)."""
    libc = _libc()
    if libc is None:
        raise LookupError("no iconv in the C library")
    handle = libc.iconv_open(target.encode(), source.encode())
    if handle in (None, _FAILED):
        raise LookupError(f"iconv cannot convert {source} to {target}")
    try:
        inbuf = ctypes.create_string_buffer(data, len(data))
        outbuf = ctypes.create_string_buffer(4 * len(data) + 16)
        inptr = ctypes.c_void_p(ctypes.addressof(inbuf))
        outptr = ctypes.c_void_p(ctypes.addressof(outbuf))
        inleft = ctypes.c_size_t(len(data))
        outleft = ctypes.c_size_t(len(outbuf))
        ctypes.set_errno(0)
        result = libc.iconv(
            handle,
            ctypes.byref(inptr),
            ctypes.byref(inleft),
            ctypes.byref(outptr),
            ctypes.byref(outleft),
        )
        bad = -1
        if result == ctypes.c_size_t(-1).value:
            if ctypes.get_errno() not in (errno.EILSEQ, errno.EINVAL):
                raise OSError(ctypes.get_errno(), "iconv failed")
            bad = len(data) - inleft.value
        return outbuf.raw[: len(outbuf) - outleft.value], bad
    finally:
        libc.iconv_close(handle)


def _decode(buffer: Any, errors: str = "strict") -> tuple[str, int]:
    """Decode a bytes-like object (the codec protocol passes any buffer)."""
    data = bytes(buffer)
    out, bad = _convert(data, ICONV_NAME, "UTF-8")
    if bad >= 0:
        raise UnicodeDecodeError(CODEC_NAME, data, bad, bad + 1, "not EUC-TW")
    return out.decode("utf-8"), len(data)


def _encode(text: str, errors: str = "strict") -> tuple[bytes, int]:
    data = text.encode("utf-8")
    out, bad = _convert(data, "UTF-8", ICONV_NAME)
    if bad >= 0:
        position = len(data[:bad].decode("utf-8", "ignore"))
        raise UnicodeEncodeError(CODEC_NAME, text, position, position + 1, "not in EUC-TW")
    return out, len(text)


@cache
def available() -> bool:
    """Whether this C library's iconv converts EUC-TW."""
    try:
        return _decode(b"\xc4\xa1")[0] != ""  # 一
    except (LookupError, OSError, UnicodeDecodeError):
        return False


def _search(name: str) -> codecs.CodecInfo | None:
    if name.lower() not in _LABELS or not available():
        return None
    return codecs.CodecInfo(_encode, _decode, name=CODEC_NAME)


@cache
def register() -> None:
    """Make `euc_tw` a codec, once per process (nothing happens where iconv lacks it)."""
    codecs.register(_search)
