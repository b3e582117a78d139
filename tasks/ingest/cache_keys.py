"""Every Prefect cache key in doc-indexer, computed from content in one place.

A key is the sha256 of: the step name, the source code of the modules that compute the step
(so any code change invalidates it), and a content token for each task input: a file's
doc_id plus the hash of its bytes, a document's loaded blocks, a chunk's text hash, a
settings model's fields. Never a path alone, and never the flow run id (Prefect's default
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
from pydantic import BaseModel

from tasks.core.records import Chunk, Document, SourceFile, sha256_hex
from tasks.embed.models import EMBEDDING_CODE
from tasks.ingest.registry import reader_code


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
    if isinstance(value, BaseModel):
        return [type(value).__name__, value.model_dump_json()]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [type(value).__name__, repr(value)]
    if isinstance(value, str) and len(value) > 64:
        return sha256_hex(value)  # a text to embed: its hash stands for it
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

    def compute_key(
        self, task_ctx: Any, inputs: dict[str, Any], flow_parameters: Any, **kwargs: Any
    ) -> str:
        payload: list[Any] = [self.step, code_version("tasks.core.records", *self.modules)]
        payload += [[name, content_token(value)] for name, value in sorted(inputs.items())]
        return f"{self.step}-{sha256_hex(json.dumps(payload))}"


# The load step: the code around the readers, and every registered reader's (whose list the
# registry keeps: tasks/ingest/registry.py).
LOAD_CODE = (
    "tasks.ingest.load",
    "tasks.ingest.parse",
    "tasks.ingest.registry",
    "tasks.ingest.unstructured_offline",
    "tasks.ingest.parse_worker",
)
LOAD_CACHE = ContentKey(step="load", modules=tuple(dict.fromkeys(LOAD_CODE + reader_code())))
SPLIT_CACHE = ContentKey(step="split", modules=("tasks.text.split", "tasks.text.semantic_split"))
EMBED_CACHE = ContentKey(step="embed", modules=EMBEDDING_CODE)
