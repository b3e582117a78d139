"""SQL literals for LanceDB filters: every user value is quoted, never pasted in as SQL."""

from __future__ import annotations


def sql_string(value: str) -> str:
    """A SQL string literal for a LanceDB filter: quoted, with quotes doubled."""
    return "'" + value.replace("'", "''") + "'"


def sql_in(column: str, values: list[str]) -> str:
    """`column IN ('a', 'b')` with every value quoted by `sql_string`."""
    return f"{column} IN ({', '.join(sql_string(v) for v in values)})"


def escape_like(text: str) -> str:
    """`text` as a LIKE pattern (backslash escape) that matches it literally."""
    return "".join("\\" + ch if ch in "%_\\" else ch for ch in text)


def glob_to_like(pattern: str) -> str:
    """A LIKE pattern (backslash escape) that matches what the fnmatch-style glob matches.

    `*` matches any run of characters (slashes included), `?` exactly one; LIKE's own
    wildcards and the escape character in the glob are matched literally.
    """
    wildcards = {"*": "%", "?": "_"}
    return "".join(wildcards.get(ch) or escape_like(ch) for ch in pattern)
