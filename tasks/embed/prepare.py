"""Prepare the ONNX files of model specs once per machine, ahead of any run.

    python -m tasks.embed.prepare [SPEC ...]      (`make install` runs it without arguments)

Without arguments: the default model's files (its English part's per-token int8 file; the
multilingual part needs none) and the fp32 export, which also encodes questions without
torch for datasets built by the torch backend (see tasks/embed/onnx_files.py for the files,
the cache and why concurrent runs are safe). Each backend says what it prepares
(tasks/embed/registry.py).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

from tasks.embed.models import BUNDLED_MODEL, DEFAULT_MODEL, parse_spec

# The default's files, and the fp32 export that also encodes questions without torch for
# datasets built by the torch backend.
EVERYDAY_SPECS = (DEFAULT_MODEL, f"onnx:{BUNDLED_MODEL}")


def main(argv: Sequence[str] | None = None) -> int:
    for spec in list(sys.argv[1:] if argv is None else argv) or EVERYDAY_SPECS:
        backend, model = parse_spec(spec)
        started = time.perf_counter()
        ready = backend.is_prepared(model)
        file = backend.prepare(model)
        if file is None and ready:
            print(f"{spec}: nothing to prepare here")
            continue
        took = "already prepared" if ready else f"prepared in {time.perf_counter() - started:.1f} s"
        print(f"{spec}: {took}" + (f": {file}" if file else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
