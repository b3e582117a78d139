"""The default backend: the model in onnxruntime, int8 with per-token activation scales.

Selected with the model spec "onnx-int8-token:<model>" (the default for new datasets:
"onnx-int8-token:all-MiniLM-L6-v2"); a dataset records the model id
"<base id>+onnx-int8-token", so its vectors never mix with another backend's.

Why it is the default: the MatMuls run in int8 (weights one scale per output channel,
activations one scale and zero point per token, computed in the graph; see
tasks/embed/onnx_files.py), about 5x torch fp32's chunks/s on 2 cores, with vector-mode
quality next to torch's (benchmarks/RESULTS.md, "Embedding backends and speed"). No
statistic spans two tokens, and each text runs in its own forward pass (no padding), so a
text's vector is the same whatever else is encoded with it, in whichever order, on any runner.

Threads: `DOC_INDEXER_EMBED_WORKERS` worker threads (default: one per available core), each
with its own onnxruntime session of one intra-op thread, take texts longest first.
onnxruntime releases the GIL while it runs, so they run in parallel; one text per pass on
one thread wastes nothing on padding or thread synchronisation. Sessions are made when
first needed, so a process that embeds one question at a time holds one.
"""

from __future__ import annotations

import queue
import threading
from pathlib import Path
from typing import Any

import numpy as np

from tasks.embed.base import ModelInfo, default_workers
from tasks.embed.onnx_backend import register_onnx_variant


class OnePassEmbedder:
    """Texts in, unit vectors out: one forward pass per text on a pool of one-thread sessions.

    A subclass says how a text becomes its token ids (`_ids`) and how one pass of those ids
    becomes a unit vector (`_forward`); this class keeps the sessions and the threads."""

    def __init__(self, onnx_file: Path, info: ModelInfo, workers: int):
        self.info = info
        self.workers = workers
        self._file = onnx_file
        self._idle: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._made = 0
        self._making = threading.Lock()
        self._idle.put(self._new_session())  # fail now, not in the first batch

    def _new_session(self) -> Any:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3
        session = onnxruntime.InferenceSession(
            str(self._file), options, providers=["CPUExecutionProvider"]
        )
        self._made += 1
        return session

    def _session(self) -> Any:
        """An idle session; a new one while fewer than `workers` exist; else wait for one."""
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        with self._making:
            if self._made < self.workers:
                return self._new_session()
        return self._idle.get()

    def _ids(self, texts: list[str]) -> list[list[int]]:
        raise NotImplementedError

    def _forward(self, session: Any, ids: list[int]) -> np.ndarray:
        raise NotImplementedError

    def encode(self, texts: list[str]) -> np.ndarray:
        return self.encode_ids(self._ids(texts))

    def encode_ids(self, encodings: list[list[int]]) -> np.ndarray:
        """The unit vectors of texts given as their token ids, on the pool's threads."""
        vectors = np.zeros((len(encodings), self.info.dimension), dtype=np.float32)
        if not encodings:
            return vectors
        # Longest first, so the last texts to finish are short ones and the workers end together.
        pending = iter(sorted(range(len(encodings)), key=lambda i: -len(encodings[i])))
        taking = threading.Lock()
        errors: list[BaseException] = []

        def work() -> None:
            session = self._session()
            try:
                while not errors:
                    with taking:
                        row = next(pending, None)
                    if row is None:
                        return
                    vectors[row] = self._forward(session, encodings[row])
            except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
                errors.append(exc)
            finally:
                self._idle.put(session)

        helpers = [
            threading.Thread(target=work) for _ in range(min(self.workers, len(encodings)) - 1)
        ]
        for helper in helpers:
            helper.start()
        work()  # the calling thread is a worker too
        for helper in helpers:
            helper.join()
        if errors:
            raise errors[0]
        return vectors


class TokenInt8Embedder(OnePassEmbedder):
    """A sentence-transformers model's per-token int8 file, with its own tokenizer.json."""

    def __init__(self, onnx_file: Path, model_path: Path, info: ModelInfo, workers: int):
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_file(str(model_path / "tokenizer.json"))
        self._tokenizer.no_padding()  # tokenizer.json pads to 128; here nothing is padded
        self._tokenizer.enable_truncation(info.max_tokens)
        self._counter = Tokenizer.from_file(str(model_path / "tokenizer.json"))
        self._counter.no_padding()
        self._counter.no_truncation()
        super().__init__(onnx_file, info, workers)

    def _ids(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._tokenizer.encode_batch(texts)]

    def _forward(self, session: Any, ids: list[int]) -> np.ndarray:
        """One text's unit vector: its own pass, the mean of its tokens' last hidden states."""
        tokens = np.asarray([ids], dtype=np.int64)
        feed = {
            "input_ids": tokens,
            "attention_mask": np.ones_like(tokens),
            "token_type_ids": np.zeros_like(tokens),
        }
        pooled = session.run(None, feed)[0][0].mean(axis=0, dtype=np.float32)
        return pooled / max(float(np.linalg.norm(pooled)), 1e-12)

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Word pieces per text, [CLS] and [SEP] included, before truncation."""
        return [len(e.ids) for e in self._counter.encode_batch(texts)]


register_onnx_variant(
    "onnx-int8-token",
    "int8-token",
    "onnxruntime, int8 with per-token activation scales, one pass per text",
    lambda onnx_file, folder, info: TokenInt8Embedder(onnx_file, folder, info, default_workers()),
    __name__,
)
