"""Ingest flow: keep a LanceDB index of a folder of documents fresh.

    python -m flows.ingest DIR [--index URI] [options]       (--help lists them)

The flow is in flows/ingest_flow.py (`from flows.ingest import ingest` is the flow); this
module is its command line. `main()` first starts Prefect's temporary API server where none
is configured (flows/temporary_server.py), which then starts while the options are read and
the flow's modules (Prefect, LanceDB, the models' libraries) are imported; a source in an
object store that cannot be listed stops the command before that, with one line. Without a Prefect
API, a run that would change nothing is not started (tasks/ingest/preview.py): the command
prints its summary without importing Prefect, and stops the server.

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
    from flows.runners import RunnerSettings
    from tasks.ingest.settings import IngestSettings

GATE_FAILED = 4  # the exit status of a run whose gate restored the previous version


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    asks_for_help = bool({"-h", "--help"} & set(args))
    source = None if asks_for_help else object_source(args)
    if source is not None and not listable(source):
        return 1  # before a server starts: the one-line error is all the command says
    server = None if asks_for_help else temporary_server.start()
    from flows.cli import exit_status

    settings, runner = parse_command(args)
    return exit_status(lambda: run_command(settings, runner, server))


def object_source(args: Sequence[str]) -> str | None:
    """The object-store prefix given as the source, as far as it can be told before the
    options are declared (their imports take a second, while the server starts): the first
    object URL that does not follow a flag (`--index s3://…` names the dataset). One right
    after a flag without a value (`--rebuild s3://…`) is checked with the run instead."""
    if not any("://" in arg for arg in args):
        return None  # a folder: nothing imported before the server starts
    from tasks.dataset.object_store import is_object_url

    for before, arg in zip(["", *args], args, strict=False):
        if is_object_url(arg) and not before.startswith("-"):
            return arg
    return None


def listable(source: str) -> bool:
    """Whether the documents at the object-store prefix `source` can be listed; if not, the
    command's one-line error is printed."""
    from flows.cli import exit_status
    from tasks.ingest.object_sources import check_source

    def check() -> int:
        check_source(source)
        return 0

    return exit_status(check) == 0


def parse_command(argv: Sequence[str]) -> tuple[IngestSettings, RunnerSettings]:
    """The run's settings and task runner from the command line (argparse exits on errors)."""
    import argparse

    from flows.runners import RunnerSettings
    from tasks.core.options import add_options, parse_options
    from tasks.ingest.object_sources import resolve_source
    from tasks.ingest.settings import IngestSettings

    description = (__doc__ or "").split("\n")[0]
    parser = argparse.ArgumentParser(prog="python -m flows.ingest", description=description)
    add_options(parser, IngestSettings)
    add_options(parser.add_argument_group("task runner"), RunnerSettings)
    args = parser.parse_args(argv)
    settings = parse_options(parser, args, IngestSettings)
    settings = settings.model_copy(update={"source_dir": resolve_source(settings.source_dir)})
    return settings, parse_options(parser, args, RunnerSettings)


def run_command(
    settings: IngestSettings,
    runner: RunnerSettings,
    server: temporary_server.TemporaryServer | None,
) -> int:
    """One ingest run, on `server` where there is one; the exit status."""
    from tasks.ingest.object_sources import check_source
    from tasks.ingest.preview import unchanged_run
    from tasks.ingest.settings import resolve_auto_model

    check_source(settings.source_dir)  # an unreachable store: one line, before any flow run
    chosen = resolve_auto_model(settings)  # once: the warm-up and the flow get its spec
    # Without a Prefect API a run that would change nothing is no flow run (nor is a question
    # without one): the temporary server that was starting meanwhile stops.
    if server is not None:
        try:
            unchanged = unchanged_run(chosen)
        except Exception:  # noqa: BLE001 - the run meets the same problem and reports it
            unchanged = None
        if unchanged is not None:
            server.stop()
            print(unchanged.render())
            print("nothing changed: no flow run recorded (no Prefect API)", file=sys.stderr)
            return 0

    from flows.ingest_flow import ingest
    from flows.runners import make_task_runner
    from tasks.dataset.location import DatasetError
    from tasks.ingest.report import terminal_progress
    from tasks.ingest.warmup import start_warm_up

    if runner.task_runner == "threads":  # with Dask, workers parse and embed, not this process
        start_warm_up(chosen)
    try:
        if server is not None:
            server.wait_until_ready()
        with terminal_progress():  # a progress bar when a person watches the run
            flow_run = ingest.with_options(task_runner=make_task_runner(runner))
            state = flow_run(**chosen.options(), return_state=True)
            summary = state.result(raise_on_failure=False)
        if isinstance(summary, BaseException):
            raise summary
    except DatasetError:
        raise
    except Exception as exc:  # noqa: BLE001 - Prefect has logged the traceback
        print(f"error: the ingest run failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(summary.render())
    if summary.gate is not None and summary.gate.failed:
        return GATE_FAILED
    return 2 if summary.failed else 0


def __getattr__(name: str) -> object:
    """`flows.ingest.ingest`, the flow, imported on first use."""
    if name == "ingest":
        from flows.ingest_flow import ingest

        return ingest
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    from flows.cli import exit_process

    exit_process(main())
