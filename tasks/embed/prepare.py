"""Prepare the ONNX files of model specs once per machine, ahead of any run.

    python -m tasks.embed.prepare [SPEC ...]      (`make install` runs it without arguments)

Without arguments: the default backend's per-token int8 file and the fp32 export, which
also encodes questions without torch for datasets built by the torch backend (see
tasks/embed/onnx_files.py for the files, the cache and why concurrent runs are safe).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tasks.embed.models import (
    BUNDLED_MODEL,
    DEFAULT_MODEL,
    ONNX_VARIANTS,
    ModelSpec,
    resolve_model,
)
from tasks.embed.onnx_files import is_prepared, prepare

EVERYDAY_SPECS = (DEFAULT_MODEL, f"onnx:{BUNDLED_MODEL}")


def main(argv: Sequence[str] | None = None) -> int:
    for spec in list(sys.argv[1:] if argv is None else argv) or EVERYDAY_SPECS:
        parsed = ModelSpec.parse(spec)
        variant = ONNX_VARIANTS.get(parsed.backend)
        if variant is None:
            print(f"{spec}: nothing to prepare (the {parsed.backend} backend loads as it is)")
            continue
        path = Path(resolve_model(parsed.model)[0])
        started = time.perf_counter()
        ready = is_prepared(path, variant)
        file = prepare(path, variant)
        took = "already prepared" if ready else f"prepared in {time.perf_counter() - started:.1f} s"
        print(f"{spec}: {took}: {file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
