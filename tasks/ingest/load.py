"""The load step: a batch of files to documents, each failure recorded on its document."""

from __future__ import annotations

import threading
from functools import partial
from typing import Literal

from tasks.core import faults
from tasks.core.options import Settings, option
from tasks.core.reasons import Reason
from tasks.core.records import Document, SourceFile
from tasks.ingest.object_sources import load_objects, needs_copies
from tasks.parse.document import ReadOptions, load_document
from tasks.parse.readers.pdf import PdfOptions
from tasks.parse.worker import ParserPool

# Share of --parse-timeout after which OCR starts no further page of a file, so that the page
# in progress can finish and the file is indexed with the pages read so far.
OCR_SHARE_OF_TIMEOUT = 0.8


class LoadSettings(Settings):
    """How to load one file, and its limits; part of the load step's cache key."""

    max_file_mb: float = option(256.0, "larger files fail as too_large", gt=0)
    parse_timeout: float = option(
        300.0, "seconds one file may take to parse; 0 = no limit, in this process", ge=0
    )
    ocr: Literal["auto", "off"] = option(
        "auto", "OCR of PDF pages without a text layer (scans): auto reads them, off skips them"
    )

    def read_options(self) -> ReadOptions:
        """The options in the readers' terms: each format's own (only PDFs have any)."""
        pdf = PdfOptions(self.ocr, OCR_SHARE_OF_TIMEOUT * self.parse_timeout)
        return ReadOptions({"pdf": pdf})


_POOL: list[ParserPool] = []  # this process's pool, once made
_POOL_LOCK = threading.Lock()


def process_parsers(model_busy_cores: bool = True) -> ParserPool:
    """The parser processes that this process's loads share, made by the first call, sized
    for the model they run beside (`ModelInfo.busy_cores`; a later call gets the same pool).

    One pool per process, as one model per process (tasks/embed/models.py, `get_embedder`):
    Prefect runs each load as a task, in a thread of this process or in a Dask worker, and
    hands it only plain data, so the load step finds its process's pool here. Whoever makes
    a run ready calls this first with the run's model: the warm-up (tasks/ingest/warmup.py)
    and the watcher (flows/watch.py) to start its first worker early, `TaskStages`
    (tasks/ingest/steps.py) before its first load."""
    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(ParserPool(model_busy_cores=model_busy_cores))
        return _POOL[0]


def load_batch(
    sources: list[SourceFile],
    settings: LoadSettings,
    priority: int = 0,
    parsers: ParserPool | None = None,
) -> list[Document]:
    """Load a batch of files; failures are recorded per document, never raised.

    Files over the size limit are not read. With a parse timeout, each file is parsed by
    `parsers` (by default this process's pool, `process_parsers`), in parallel; one that
    overruns it is replaced. Batches loading at once get the parsers lowest `priority` first.
    Neither changes what a batch loads, only when and where: no part of the step's cache key.
    """
    faults.maybe_fail("load")
    if needs_copies(sources, settings.max_file_mb):  # objects in a store: read local copies
        local = partial(load_batch, settings=settings, priority=priority, parsers=parsers)
        return load_objects(sources, settings.max_file_mb, local)
    loaded: dict[str, Document] = {}
    to_parse: list[SourceFile] = []
    for source in sources:
        faults.maybe_crash("load")
        size_mb = source.size / 2**20
        if size_mb > settings.max_file_mb:
            message = f"{size_mb:.1f} MiB is over the {settings.max_file_mb:g} MiB limit"
            loaded[source.doc_id] = Document.not_indexed(source, Reason.TOO_LARGE, message)
        elif settings.parse_timeout:
            to_parse.append(source)
        else:
            loaded[source.doc_id] = load_document(source, settings.read_options())
    pool = parsers or process_parsers()
    parsed = pool.load_all(to_parse, settings.read_options(), settings.parse_timeout, priority)
    loaded.update((doc.doc_id, doc) for doc in parsed)
    return [loaded[source.doc_id] for source in sources]
