"""The formats' facts as the rest of the system looks them up, derived from the registered
readers (tasks/parse/registry.py; importing this module loads every reader module, which
import their parsers only when they read).

A reader module may not import this module: it is built while they register.
"""

from __future__ import annotations

from tasks.parse.registry import Format, readers

FORMATS: tuple[Format, ...] = tuple(reader.format for reader in readers().values())

# Suffix → MIME type: what discovery picks up.
MIME_TYPES = {suffix: f.mime for f in FORMATS for suffix in f.suffixes}

# `--type` values: the suffixes without their dot (md and markdown → text/markdown).
TYPES = {suffix.lstrip("."): mime for suffix, mime in MIME_TYPES.items()}

# MIME type → the format.
BY_MIME = {f.mime: f for f in FORMATS}
