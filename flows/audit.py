"""Audit: prove that the index matches its folder and is whole, or repair it.

    python -m flows.audit [--index URI] [--source DIR] [--repair]

The flow is in flows/audit_flow.py (`from flows.audit import audit_index` is the flow); this
module is its command line, which prints the report: the counts and the first examples of
each problem (tasks/ingest/audit.py lists every check). Like `flows.ingest`, it first starts
Prefect's temporary API server where none is configured (flows/temporary_server.py), before
Prefect is imported. With --repair it fixes what it found in place (one ingest run re-indexes
the documents concerned; each document is replaced in one commit) and audits again.

Exit status: 0 when the index is clean (after --repair: clean again), 3 when problems were
found (and remain), 1 on an error. The Prefect flow run ends Completed when clean, Failed
with the number of problems otherwise.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from flows import temporary_server
from flows.cli import exit_process, exit_status

PROBLEMS_FOUND = 3  # the exit status of an audit that found problems


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    server = None if {"-h", "--help"} & set(args) else temporary_server.start()
    from flows.audit_flow import AuditRequest, audit_index
    from tasks.core.options import add_options, parse_options
    from tasks.ingest.audit import AuditReport

    parser = argparse.ArgumentParser(
        prog="python -m flows.audit", description=(__doc__ or "").split("\n")[0]
    )
    add_options(parser, AuditRequest)
    request = parse_options(parser, parser.parse_args(args), AuditRequest)

    def run() -> int:
        if server is not None:
            server.wait_until_ready()
        state = audit_index(**request.options(), return_state=True)
        report = state.result(raise_on_failure=False)
        if not isinstance(report, AuditReport):  # the run itself failed
            print(f"error: the audit run failed: {report}", file=sys.stderr)
            return 1
        print(report.render())
        return 0 if report.clean else PROBLEMS_FOUND

    return exit_status(run)


def __getattr__(name: str) -> object:
    """`flows.audit.audit_index`, the flow, imported on first use."""
    if name == "audit_index":
        from flows.audit_flow import audit_index

        return audit_index
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    exit_process(main())
