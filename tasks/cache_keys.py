"""Every Prefect cache key in doc-indexer, computed from content in one place.

A key is the sha256 of: the step name, the source code of the modules that compute the step
(so any code change invalidates it), and a content token for each task input: a file's
doc_id plus the hash of its bytes, a document's loaded blocks, a chunk's text hash, a
settings dataclass's fields. Never a path alone, and never the flow run id (Prefect's default
policy includes it, which would make caching useless across runs).

The write step has no cache: a cached write could claim rows that are not in the table
(e.g. after the dataset folder was deleted); writes are idempotent instead.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys
from dataclasses import dataclass
from functools import cache
from typing import Any

from prefect.cache_policies import CachePolicy

from tasks.records import Chunk, Document, SourceFile, sha256_hex


def content_token(value: Any) -> Any:
    """A JSON-able stand-in for a task input that changes exactly when its content does."""
    if isinstance(value, SourceFile):
        return ["file", value.doc_id, value.content_hash]
    if isinstance(value, Document):
        return ["doc", value.doc_id, value.source.content_hash, sha256_hex(repr(value))]
    if isinstance(value, Chunk):
        return value.text_hash
    if isinstance(value, list | tuple):
        return [content_token(item) for item in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [type(value).__name__, repr(value)]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise TypeError(f"no content token for task input of type {type(value).__name__}")


@cache
def code_version(*module_names: str) -> str:
    """Hash of the source code of the named modules (already imported)."""
    return sha256_hex("".join(inspect.getsource(sys.modules[name]) for name in module_names))


@dataclass
class ContentKey(CachePolicy):
    """Cache key from the step's code and its inputs' content; nothing else."""

    step: str = ""
    modules: tuple[str, ...] = ()

    def compute_key(self, task_ctx, inputs: dict[str, Any], flow_parameters, **kwargs) -> str:
        payload = [self.step, code_version("tasks.records", *self.modules)]
        payload += [[name, content_token(value)] for name, value in sorted(inputs.items())]
        return f"{self.step}-{sha256_hex(json.dumps(payload))}"


LOAD_CACHE = ContentKey(step="load", modules=("tasks.load", "tasks.offline", "tasks.parse_worker"))
SPLIT_CACHE = ContentKey(step="split", modules=("tasks.split",))
EMBED_CACHE = ContentKey(step="embed", modules=("tasks.embed",))

# Results of the cached steps are kept on disk (that is the cache), not in memory: by default
# Prefect keeps a flow run's last 1,000 cache-keyed task results in memory, i.e. the documents,
# chunks and vectors of up to 1,000 batches (measured: 150 results of 2 MiB grew a flow's RSS
# by 315 MB; with cache_result_in_memory=False it stayed flat).
PERSISTED = {"persist_result": True, "cache_result_in_memory": False}
