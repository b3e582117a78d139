"""Objects in a store (`s3://`, `gs://`, `az://`), reached with the settings LanceDB takes.

LanceDB reaches object stores through the Rust `object_store` crate; obstore is that crate's
Python binding, so one set of credentials serves the dataset and everything else the project
keeps in a store (document sources, the cross-machine ingest lock): the standard variables
(AWS_*, GOOGLE_*, AZURE_*), which both read themselves, and DOC_INDEXER_STORAGE_OPTIONS
(`tasks.dataset.location.storage_options`), whose LanceDB-style keys ("endpoint",
"allow_http", "region") are translated here into obstore's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from tasks.dataset.location import DatasetError, local_path, storage_options

if TYPE_CHECKING:
    from obstore.store import ObjectStore

# The object_store crate's HTTP client settings; every other option belongs to the store.
CLIENT_OPTIONS = frozenset(
    {
        "allow_http",
        "allow_invalid_certificates",
        "connect_timeout",
        "default_content_type",
        "http1_only",
        "http2_only",
        "pool_idle_timeout",
        "pool_max_idle_per_host",
        "proxy_url",
        "timeout",
        "user_agent",
    }
)
# The prefix obstore's store settings carry, by URL scheme.
STORE_PREFIXES = {"s3": "aws_", "s3a": "aws_", "gs": "google_", "az": "azure_", "abfs": "azure_"}


def is_object_url(uri: str) -> bool:
    """Whether `uri` names a place in an object store rather than a local path."""
    return local_path(uri) is None


def obstore_options(scheme: str, options: dict[str, str]) -> tuple[dict[str, str], dict[str, Any]]:
    """LanceDB storage options as obstore's (store config, client options) for `scheme`."""
    prefix = STORE_PREFIXES.get(scheme)
    if prefix is None:
        raise DatasetError(
            f"unsupported object store {scheme}://; use one of "
            + ", ".join(f"{name}://" for name in STORE_PREFIXES)
        )
    config: dict[str, str] = {}
    client: dict[str, Any] = {}
    for key, value in options.items():
        name = key.lower()
        if name in CLIENT_OPTIONS:
            client[name] = value
        else:
            config[name if name.startswith(prefix) else prefix + name] = value
    return config, client


def open_store(url: str) -> ObjectStore:
    """The store at `url` (`s3://bucket/prefix`): paths given to it are relative to the prefix.

    A store that cannot be configured (an unknown option, a malformed URL) is a DatasetError
    naming the URL; one that cannot be reached fails on first use.
    """
    from obstore.exceptions import BaseError
    from obstore.store import from_url  # here: commands that never touch a store skip it

    scheme = url.split("://", 1)[0].lower()
    config, client = obstore_options(scheme, storage_options())
    try:
        # obstore's typed dicts list every key; these come from the user and are checked by it
        return from_url(
            url, config=cast(Any, config or None), client_options=cast(Any, client or None)
        )
    except (BaseError, ValueError) as exc:  # an unknown option, a malformed URL
        raise DatasetError(f"cannot open the object store at {url}: {exc}") from None
