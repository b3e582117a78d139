"""Every place doc-indexer relies on Prefect's internals, here and nowhere else (issue 36).

Prefect is pinned to the minor version these were checked on (pyproject.toml);
tests/test_prefect_compat.py fails when a release changes one of them underneath. What is
relied on, where, and why:

The temporary API server (flows/temporary_server.py starts Prefect's own server command
before Prefect is imported, see its docstring):
- `SERVER_ENV`: the environment Prefect's `SubprocessASGIServer._run_uvicorn_command` gives
  its server, among it the private `PREFECT__SERVER_EPHEMERAL` (no UI, ephemeral services)
  and `PREFECT__SERVER_FINAL`, which `prefect.server.api.server.create_app` reads.
- `server_command(port)`: that method's uvicorn command, around the app factory
  `prefect.server.api.server:create_app`.
- `PORT_TAKEN`: uvicorn's exit status when it cannot bind, on which Prefect's server (and
  ours) moves to another port.
- `REGISTER_BLOCKS` and `DATABASE_SETTINGS`: the environment names (current and legacy
  alias) of the settings that skip block registration and move the database.
- `DATABASE_FILE` and `FLOW_RUN_TABLE`: the default database is SQLite, `prefect.db` in
  Prefect's home, and a migrated, empty copy of it (no `flow_run` row) starts a new home
  without migrating (the seed; tests/test_temporary_server.py runs a real server on one).
- `startup_timeout()` and `reread_settings()`: the server's start-up timeout setting, and
  `prefect.context.refresh_global_settings_context` (undocumented) that makes an imported
  Prefect read a changed PREFECT_API_URL.

The settings' sources, re-derived without importing Prefect (flows/prefect_settings.py:
importing `prefect.settings` is all of `prefect`, more than half of a question's start-up):
- `user_settings(cwd)`: the environment, then `.env`, `prefect.toml` and `pyproject.toml`
  (`[tool.prefect]`) of the working directory, then the active profile of the profiles file
  (PREFECT_PROFILES_PATH, else `profiles.toml` in PREFECT_HOME, `~/.prefect`), the first
  source that sets a setting winning, names in any case (`Settings.settings_customise_sources`,
  `ProfileSettingsTomlLoader`).
- `environment_names(table)`: a prefect.toml table's settings under their variable names.

A flow run's context (tasks/ingest/steps.py):
- `unlink_results(result)`: `FlowRunContext.run_results`, the dict from `id()` of a task's
  result and of each element of a returned list to its state, which Prefect keeps for the
  whole flow run; entries are popped to free them (see `unlink_results`).

A flow run's heartbeats (every flow module, flows/*.py, at import):
- `prompt_heartbeats()`: `prefect.flow_engine._send_heartbeats(engine, join_on_exit)`, the
  context manager around a flow run whose daemon thread sends the run's heartbeats (through
  the engine's `heartbeat_seconds`, `_build_heartbeat_event_template` and
  `_emit_flow_run_heartbeat`), is replaced by one that wakes when the run ends.

Logging (tasks/ingest/report.py):
- `log_console()`: the `rich` Console kept as `.console` by Prefect's `PrefectConsoleHandler`
  on the root logger, which the progress bar shares.

Prefect itself is imported only inside the functions that use it: the constants and the
settings' reading run before Prefect is imported.
"""

from __future__ import annotations

import contextvars
import importlib.util
import logging
import os
import sys
import threading
import tomllib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# --- The temporary API server ------------------------------------------------------------------

# What SubprocessASGIServer._run_uvicorn_command sets for its server: no UI, an ephemeral
# server (private variables read by create_app), the last app of its process.
SERVER_ENV = {
    "PREFECT_UI_ENABLED": "0",
    "PREFECT__SERVER_EPHEMERAL": "1",
    "PREFECT__SERVER_FINAL": "1",
}
SERVER_APP = "prefect.server.api.server:create_app"  # uvicorn's --factory
PORT_TAKEN = 3  # uvicorn's exit status when it cannot start (a taken port)
# The setting that registers Prefect's block types at start, under both of its names.
REGISTER_BLOCKS = {
    "PREFECT_SERVER_REGISTER_BLOCKS_ON_START",
    "PREFECT_API_BLOCKS_REGISTER_ON_START",
}
# The settings that move Prefect's database away from DATABASE_FILE in its home.
DATABASE_SETTINGS = {
    f"PREFECT_{scope}_DATABASE_{name}"
    for scope in ("SERVER", "API")
    for name in ("CONNECTION_URL", "DRIVER", "NAME")
}
DATABASE_FILE = "prefect.db"  # the SQLite database in Prefect's home
FLOW_RUN_TABLE = "flow_run"  # a database without rows here has recorded no run


def server_command(port: int) -> list[str]:
    """Prefect's command for its temporary server on `port` (that of
    `SubprocessASGIServer._run_uvicorn_command`), found without importing Prefect."""
    spec = importlib.util.find_spec("prefect")
    assert spec is not None and spec.origin is not None
    app_dir = str(Path(spec.origin).parents[1])  # prefect.__module_path__.parent
    command = [sys.executable, "-m", "uvicorn", "--app-dir", app_dir, "--factory", SERVER_APP]
    command += ["--host", "127.0.0.1", "--port", str(port)]
    return command + ["--log-level", "error", "--lifespan", "on"]


def startup_timeout() -> float:
    """Seconds a temporary server may take to start (server.ephemeral.startup_timeout_seconds)."""
    from prefect.settings import get_current_settings

    return float(get_current_settings().server.ephemeral.startup_timeout_seconds)


def reread_settings() -> None:
    """Make an already imported Prefect read its settings from the environment again (e.g. a
    new PREFECT_API_URL): Prefect fixes them once, at import."""
    from prefect.context import refresh_global_settings_context

    refresh_global_settings_context()


# --- Where Prefect reads its settings --------------------------------------------------------


def environment_names(table: dict[str, Any], prefix: str = "PREFECT") -> dict[str, Any]:
    """Prefect's environment variable for each setting of a prefect.toml table, e.g.
    `[server.ephemeral] startup_timeout_seconds` →
    PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS."""
    names: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}_{key.upper()}"
        if isinstance(value, dict):
            names |= environment_names(value, name)
        else:
            names[name] = value
    return names


def read_toml(path: Path) -> dict[str, Any]:
    """A TOML file's document; empty when it is missing or not TOML (Prefect skips it too)."""
    try:
        return tomllib.loads(path.read_text("utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return {}


def _prefect_variables(variables: Mapping[str, str | None]) -> dict[str, str]:
    """The PREFECT_ variables among `variables`; Prefect reads their names in any case."""
    return {
        name.upper(): value
        for name, value in variables.items()
        if name.upper().startswith("PREFECT_") and value is not None
    }


def _dotenv(cwd: Path) -> dict[str, str]:
    """The PREFECT_ variables of the working directory's `.env`, read as Prefect reads it."""
    if not (cwd / ".env").is_file():
        return {}
    from dotenv import dotenv_values  # Prefect's reader of .env, only where there is one

    return _prefect_variables(dotenv_values(cwd / ".env"))


def profiles_file(found: dict[str, Any]) -> Path | None:
    """The user's Prefect profiles file, where Prefect would look for it (`found`: the settings
    read so far, which may name it)."""
    if found.get("PREFECT_PROFILES_PATH"):
        return Path(found["PREFECT_PROFILES_PATH"])
    home = Path(os.environ.get("PREFECT_HOME", Path.home() / ".prefect")).expanduser()
    path = home / "profiles.toml"
    return path if path.is_file() else None


def _profile(profiles: Path | None) -> dict[str, Any]:
    """The settings of the active profile in `profiles`."""
    document = read_toml(profiles) if profiles is not None else {}
    active = os.environ.get("PREFECT_PROFILE") or document.get("active", "ephemeral")
    return dict(document.get("profiles", {}).get(active, {}))


def user_settings(cwd: Path, project_settings: Path | None = None) -> dict[str, Any]:
    """The Prefect settings the user has set where Prefect would read them, with their
    values (the first source Prefect would take wins). A `prefect.toml` in `cwd` that is
    `project_settings` (doc-indexer's own) is not the user's."""
    found = environment_names(read_toml(cwd / "pyproject.toml").get("tool", {}).get("prefect", {}))
    local = cwd / "prefect.toml"
    if local.is_file() and (project_settings is None or local.resolve() != project_settings):
        found |= environment_names(read_toml(local))
    found |= _dotenv(cwd) | _prefect_variables(os.environ)
    return _profile(profiles_file(found)) | found


# --- A flow run's context -------------------------------------------------------------------


def unlink_results(result: list[Any]) -> None:
    """Drop the running flow's links from `result`, a task's returned list, and from each of
    its elements to their task run (nothing outside a flow run).

    Prefect keeps them in `FlowRunContext.run_results` (keyed by `id()`) for as long as the
    flow runs, to draw the task graph from task inputs it walks; doc-indexer passes its tasks'
    inputs unwalked, so they are never read, and one per document came to about 40 MiB over
    100,000 files (benchmarks/RESULTS.md, "Scale on this session's machine")."""
    from prefect.context import FlowRunContext

    context = FlowRunContext.get()
    if context is not None:
        for item in (result, *result):
            context.run_results.pop(id(item), None)


# --- A flow run's heartbeats -----------------------------------------------------------------


def prompt_heartbeats() -> None:
    """Let a flow run end as soon as its work does, heartbeats unchanged.

    Prefect's sync engine sends a flow run's heartbeats (one at the start, then every
    `flows.heartbeat_frequency` seconds, 180 by default) from a thread that sleeps in steps of
    one second and joins it when the run ends: every run returned 0–1 s after its work, about
    half a second on average, as much as a no-change ingest run's own work
    (benchmarks/RESULTS.md, issue 39). The replacement sends the same heartbeats from the same
    kind of thread, which waits on the run's end instead of sleeping, so the join returns at
    once (or when a heartbeat being sent is out). Idempotent; call it after importing Prefect.
    """
    from prefect import flow_engine

    if getattr(flow_engine._send_heartbeats, "prompt", False):
        return

    @contextmanager
    def send_heartbeats(engine: Any, join_on_exit: bool = True) -> Iterator[None]:
        seconds = engine.heartbeat_seconds
        if seconds is None:
            yield
            return
        resource, related = engine._build_heartbeat_event_template()
        ended = threading.Event()

        def beat() -> None:
            while not ended.is_set():
                state = engine.flow_run.state if engine.flow_run else None
                if state is not None and state.is_final():
                    return
                try:
                    engine._emit_flow_run_heartbeat(resource, related)
                except Exception:  # noqa: BLE001 - a missed heartbeat never fails the run
                    engine.logger.debug("Failed to emit heartbeat", exc_info=True)
                ended.wait(seconds)

        # The thread sees the run's settings (its API URL) as Prefect's own does.
        thread = threading.Thread(target=contextvars.copy_context().run, args=(beat,), daemon=True)
        thread.start()
        try:
            yield
        finally:
            ended.set()
            if join_on_exit:
                thread.join(timeout=2)

    send_heartbeats.prompt = True  # type: ignore[attr-defined]
    flow_engine._send_heartbeats = send_heartbeats


# --- Logging ----------------------------------------------------------------------------------


def log_console() -> Any:
    """The rich Console that Prefect's console log handler on the root logger prints to, or
    None where there is no such handler."""
    from prefect.logging.handlers import PrefectConsoleHandler

    handlers = logging.getLogger().handlers
    return next((h.console for h in handlers if isinstance(h, PrefectConsoleHandler)), None)
