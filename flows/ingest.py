"""Ingest flow: keep a LanceDB index of a folder of documents fresh.

    python -m flows.ingest DIR [--index URI] [options]       (--help lists them)

The flow and its options are in flows/ingest_flow.py (`from flows.ingest import ingest` is
the flow). This module imports neither: `main()` first starts Prefect's temporary API server
where none is configured (flows/temporary_server.py), which then starts while the flow's
modules (Prefect, LanceDB, the models' libraries) are imported.

Exit status: 0 when every file ended indexed, empty or unchanged; 2 when the run completed but
some files failed (listed in the summary with their reasons); 4 when --gate found search worse
and restored the previous version; 1 when the run itself failed. The Prefect flow run says the
same: Completed with the message "N file(s) failed" or "no file failed", or Failed (the gate's
message has both scores).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from flows import temporary_server

if TYPE_CHECKING:
    from flows.ingest_flow import ingest as ingest


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    server = None if {"-h", "--help"} & set(args) else temporary_server.start()
    from flows.ingest_flow import run_command

    return run_command(args, (__doc__ or "").split("\n")[0], server)


def __getattr__(name: str) -> object:
    """`flows.ingest.ingest`, the flow, imported on first use."""
    if name == "ingest":
        from flows.ingest_flow import ingest

        return ingest
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    sys.exit(main())
