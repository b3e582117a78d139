"""The canary of tasks/core/prefect_compat.py: each Prefect internal it names still exists and
behaves as doc-indexer relies on. A failure here means the installed Prefect changed under
that module: change the module (and its callers) with it, then the pin in pyproject.toml.

A real temporary server starting from the seeded copy of the database is
tests/test_temporary_server.py's `test_a_new_home_starts_from_the_seed_the_first_one_kept`
(integration: it starts two servers)."""

from __future__ import annotations

import ast
import inspect
import logging
import os
import subprocess
import sys
import textwrap
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from flows import prefect_settings
from tasks.core import prefect_compat

from .conftest import ROOT

# --- The temporary API server -----------------------------------------------------------------


def test_the_command_and_its_settings_are_prefects_own(monkeypatch):
    """Fails when Prefect changes how it starts its temporary server: flows/temporary_server.py
    then needs the same change."""
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import get_current_settings

    launched: dict[str, object] = {}
    monkeypatch.setattr(subprocess, "Popen", lambda **kwargs: launched.update(kwargs))
    server = SubprocessASGIServer(port=7999)
    try:
        server._run_uvicorn_command()  # what SubprocessASGIServer.start() runs
    finally:
        server.stop()
    assert launched["args"] == prefect_compat.server_command(7999)
    env = launched["env"]
    assert isinstance(env, dict)
    settings = get_current_settings().to_environment_variables(exclude_unset=True)
    added = {k: v for k, v in env.items() if k not in os.environ and k not in settings}
    assert added == prefect_compat.SERVER_ENV


def test_the_app_factory_reads_the_private_server_variables():
    """`create_app` still takes its ephemeral and final modes from the private variables of
    SERVER_ENV (read from its source: the modes only show once a server runs its lifespan)."""
    from prefect.server.api import server

    module, factory = prefect_compat.SERVER_APP.split(":")
    assert module == server.__name__ and callable(getattr(server, factory))
    source = inspect.getsource(getattr(server, factory))
    for name in prefect_compat.SERVER_ENV:
        if name.startswith("PREFECT__"):
            assert f'os.getenv("{name}")' in source, name


def test_uvicorn_exits_with_port_taken_when_it_cannot_bind(tmp_path):
    """The status on which Prefect's server, and flows/temporary_server.py, take another port."""
    import socket

    from prefect.server.api.server import SubprocessASGIServer

    assert f"poll() == {prefect_compat.PORT_TAKEN}" in inspect.getsource(SubprocessASGIServer)
    (tmp_path / "tiny.py").write_text("async def app(scope, receive, send):\n    pass\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "uvicorn", "--app-dir", str(tmp_path), "tiny:app"]
            + ["--host", "127.0.0.1", "--port", str(port), "--lifespan", "off"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == prefect_compat.PORT_TAKEN, result.stderr[-2000:]


@pytest.mark.parametrize("name", sorted(prefect_compat.REGISTER_BLOCKS))
def test_either_name_turns_block_registration_off(clean_env, tmp_path, monkeypatch, name):
    from prefect.settings import Settings

    monkeypatch.chdir(tmp_path)
    assert Settings().server.register_blocks_on_start is True
    clean_env[name] = "false"
    assert Settings().server.register_blocks_on_start is False


@pytest.mark.parametrize("name", sorted(prefect_compat.DATABASE_SETTINGS))
def test_each_database_setting_is_one_prefect_reads(clean_env, tmp_path, monkeypatch, name):
    """Each name sets a field of Prefect's database settings (unset by default), so a user
    who sets one has a database of their own: no seed is planted."""
    from prefect.settings import Settings

    monkeypatch.chdir(tmp_path)
    field = name.split("_DATABASE_")[1].lower()
    values = {
        "connection_url": "postgresql+asyncpg://user@db/elsewhere",
        "driver": "sqlite+aiosqlite",
        "name": "elsewhere",
    }
    assert getattr(Settings().server.database, field) is None or field == "connection_url"
    clean_env[name] = values[field]
    read = getattr(Settings().server.database, field)
    assert (read.get_secret_value() if hasattr(read, "get_secret_value") else read) == values[field]


def test_the_default_database_is_sqlite_in_the_home_with_a_flow_run_table(
    clean_env, tmp_path, monkeypatch
):
    """What the seed relies on: the database a new home gets is `DATABASE_FILE` in it, and a
    run is a row of `FLOW_RUN_TABLE`."""
    from prefect.server.database import orm_models
    from prefect.settings import Settings

    monkeypatch.chdir(tmp_path)
    clean_env["PREFECT_HOME"] = str(tmp_path / "home")
    url = Settings().server.database.connection_url
    assert url is not None
    expected = f"sqlite+aiosqlite:///{tmp_path / 'home' / prefect_compat.DATABASE_FILE}"
    assert url.get_secret_value() == expected
    assert orm_models.FlowRun.__tablename__ == prefect_compat.FLOW_RUN_TABLE


SETTINGS_PROBE = textwrap.dedent(
    """
    import logging, os
    from tasks.core import prefect_compat
    from prefect.settings import get_current_settings
    from prefect.logging.configuration import setup_logging
    from rich.console import Console

    print(prefect_compat.startup_timeout())
    os.environ["PREFECT_API_URL"] = "http://127.0.0.1:4321/api"
    before = get_current_settings().api.url
    prefect_compat.reread_settings()
    print(before, get_current_settings().api.url)
    setup_logging()  # as a flow run does
    print(isinstance(prefect_compat.log_console(), Console))
    logging.getLogger().handlers.clear()
    print(prefect_compat.log_console())
    """
)


def test_the_timeout_the_rereading_and_the_log_console():
    """In a fresh process: the start-up timeout setting is read; an imported Prefect sees a
    changed PREFECT_API_URL only once its settings are re-read; Prefect's console log handler
    on the root logger keeps the rich Console that the progress bar shares."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env |= {"PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "77", "PREFECT_HOME": "/nowhere"}
    result = subprocess.run(
        [sys.executable, "-c", SETTINGS_PROBE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("\n")[:4] == [
        "77.0",
        "None http://127.0.0.1:4321/api",
        "True",
        "None",
    ], result.stderr[-3000:]


# --- Where Prefect reads its settings -----------------------------------------------------------


def test_what_counts_as_set_by_the_user_is_what_prefect_reads(clean_env, tmp_path, monkeypatch):
    """Every source Prefect reads (environment, .env, prefect.toml, pyproject.toml, the
    profile .env names) gives the settings Prefect's own Settings sees as set, and only those."""
    from prefect.settings import Settings

    monkeypatch.chdir(tmp_path)
    profiles = tmp_path / "profiles.toml"
    profiles.write_text(
        'active = "mine"\n[profiles.mine]\nPREFECT_SERVER_ANALYTICS_ENABLED = "true"\n'
    )
    clean_env["PREFECT_LOGGING_LEVEL"] = "DEBUG"
    (tmp_path / ".env").write_text(
        f"PREFECT_API_URL=http://127.0.0.1:4299/api\nPREFECT_PROFILES_PATH={profiles}\n"
    )
    (tmp_path / "prefect.toml").write_text("[server.ephemeral]\nstartup_timeout_seconds = 45\n")
    (tmp_path / "pyproject.toml").write_text('[tool.prefect]\nhome = "elsewhere"\n')
    names = set(prefect_compat.environment_names(prefect_compat.read_toml(ROOT / "prefect.toml")))
    names |= {"PREFECT_API_URL", "PREFECT_PROFILES_PATH"}
    ours = set(prefect_settings.user_settings(tmp_path)) & names
    assert ours == names, "each source counts"
    assert set(Settings().to_environment_variables(exclude_unset=True)) & names == ours
    assert prefect_settings.configured_api_url(tmp_path) == "http://127.0.0.1:4299/api"


def test_the_first_source_in_prefects_order_wins(clean_env, tmp_path, monkeypatch):
    """One setting in every source, each with its own value: as the sources are taken away,
    highest first, the value read here is the one Prefect's Settings takes."""
    from prefect.settings import Settings

    monkeypatch.chdir(tmp_path)
    name = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
    profiles = tmp_path / "profiles.toml"
    profiles.write_text(f'active = "mine"\n[profiles.mine]\n{name} = "55"\n')
    clean_env["PREFECT_PROFILES_PATH"] = str(profiles)
    sources: list[tuple[int, Any]] = [
        (11, lambda: clean_env.pop(name.lower())),  # names are read in any case
        (22, lambda: (tmp_path / ".env").unlink()),
        (33, lambda: (tmp_path / "prefect.toml").unlink()),
        (44, lambda: (tmp_path / "pyproject.toml").unlink()),
        (55, lambda: profiles.unlink()),
    ]
    clean_env[name.lower()] = "11"
    (tmp_path / ".env").write_text(f"{name}=22\n")
    (tmp_path / "prefect.toml").write_text("[server.ephemeral]\nstartup_timeout_seconds = 33\n")
    (tmp_path / "pyproject.toml").write_text(
        "[tool.prefect.server.ephemeral]\nstartup_timeout_seconds = 44\n"
    )
    for value, take_away in sources:
        ours = prefect_compat.user_settings(tmp_path).get(name)
        assert ours is not None and int(ours) == value
        assert Settings().server.ephemeral.startup_timeout_seconds == value
        take_away()
    assert name not in prefect_compat.user_settings(tmp_path)


def test_the_profiles_file_is_in_the_home_unless_named(clean_env, tmp_path):
    from prefect.settings import Settings

    clean_env["PREFECT_HOME"] = str(tmp_path / "home")
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "profiles.toml").write_text("")
    assert Settings().profiles_path == prefect_compat.profiles_file({})
    clean_env["PREFECT_PROFILES_PATH"] = str(tmp_path / "mine.toml")
    named = prefect_compat.profiles_file({"PREFECT_PROFILES_PATH": str(tmp_path / "mine.toml")})
    assert Settings().profiles_path == named


# --- A flow run's context -----------------------------------------------------------------------


@dataclass
class Loaded:
    """A task's result element (a dataclass, as doc-indexer's documents are)."""

    name: str


def test_a_flow_run_links_a_tasks_list_and_its_elements_until_unlinked():
    """Prefect links a task's returned list and each element by `id()` in
    `FlowRunContext.run_results`; `unlink_results` takes every link away."""
    from prefect.client.schemas.objects import RunType, State
    from prefect.context import FlowRunContext
    from prefect.states import Completed
    from prefect.utilities.engine import get_state_for_result, link_state_to_task_run_result

    annotation = FlowRunContext.model_fields["run_results"].annotation
    assert annotation == dict[int, tuple[State, RunType, Any]]
    result = [Loaded("a"), Loaded("b")]
    context = FlowRunContext.model_construct(run_results={})  # a flow run's, without a server
    with context:
        link_state_to_task_run_result(Completed(), result)
        assert set(context.run_results) == {id(result), id(result[0]), id(result[1])}
        assert get_state_for_result(result[1]) is not None
        prefect_compat.unlink_results(result)
        assert context.run_results == {}
        assert get_state_for_result(result) is None and get_state_for_result(result[0]) is None
    prefect_compat.unlink_results(result)  # outside a flow run: nothing to do


# --- A flow run's heartbeats ------------------------------------------------------------------


class BeatingEngine:
    """What of a flow run engine the heartbeats read: its interval, the event's template, the
    sending, the run's state and its logger."""

    heartbeat_seconds: int | None = 60
    flow_run = None
    logger = logging.getLogger("test-heartbeats")

    def __init__(self) -> None:
        self.sent = threading.Event()
        self.beats = 0

    def _build_heartbeat_event_template(self) -> tuple[str, list[str]]:
        return "resource", ["related"]

    def _emit_flow_run_heartbeat(self, resource: str, related: list[str]) -> None:
        assert (resource, related) == ("resource", ["related"])
        self.beats += 1
        self.sent.set()


def test_prefects_engine_sends_heartbeats_as_the_replacement_expects():
    """The sync engine enters `flow_engine._send_heartbeats(self)` by its module-level name
    around a run, and the engine has what the replacement reads; fails when Prefect changes
    either (then prompt_heartbeats changes with it)."""
    from prefect import flow_engine

    source = inspect.getsource(flow_engine.FlowRunEngine.run_context)
    assert "with _send_heartbeats(self):" in source
    original = inspect.signature(flow_engine._send_heartbeats)
    assert list(original.parameters) == ["engine", "join_on_exit"]
    engine = flow_engine.BaseFlowRunEngine
    assert isinstance(inspect.getattr_static(engine, "heartbeat_seconds"), property)
    assert list(inspect.signature(engine._emit_flow_run_heartbeat).parameters) == [
        "self",
        "resource",
        "related",
    ]
    assert list(inspect.signature(engine._build_heartbeat_event_template).parameters) == ["self"]


def test_the_heartbeats_thread_beats_at_the_start_and_ends_with_the_run():
    from prefect import flow_engine

    prefect_compat.prompt_heartbeats()
    prefect_compat.prompt_heartbeats()  # once is enough; twice changes nothing
    send = flow_engine._send_heartbeats
    assert send.prompt  # type: ignore[attr-defined]
    before = set(threading.enumerate())
    engine = BeatingEngine()
    with send(engine):
        assert engine.sent.wait(30), "no heartbeat at the start of the run"
        assert len(set(threading.enumerate()) - before) == 1  # the beating thread
    # Joined on exit: it woke when the run ended (Prefect's slept on, up to a second, after
    # the 2-s join below had to wait for it: with a 60-s interval it would still be asleep).
    assert set(threading.enumerate()) - before == set()
    assert engine.beats == 1
    engine.heartbeat_seconds = None  # heartbeats off (flows.heartbeat_frequency unset)
    with send(engine):
        assert set(threading.enumerate()) - before == set()
    assert engine.beats == 1


def test_the_compat_module_imports_no_prefect():
    """flows/prefect_settings.py and flows/temporary_server.py use it before Prefect is imported."""
    probe = "import sys; import tasks.core.prefect_compat; print('prefect' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.stdout.strip() == "False", result.stderr[-2000:]


# Imports of Prefect's internals, and what code (not docstrings) names of them.
GUARDED_MODULES = (
    "prefect.server",
    "prefect._internal",
    "prefect.settings.models",
    "prefect.utilities.engine",
)
GUARDED_NAMES = {
    "FlowRunContext",
    "refresh_global_settings_context",
    "PrefectConsoleHandler",
    "flow_engine",
}
GUARDED_ATTRIBUTES = {"run_results", "_send_heartbeats"}


def internals_touched(path: Path) -> list[str]:
    """The Prefect internals that the code of `path` imports or names."""
    tree = ast.parse(path.read_text("utf-8"))
    docstrings = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules = [node.module]
            found += [alias.name for alias in node.names if alias.name in GUARDED_NAMES]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        else:
            modules = []
        found += [m for m in modules if m.startswith(GUARDED_MODULES)]
        if isinstance(node, ast.Attribute) and node.attr in GUARDED_ATTRIBUTES:
            found.append(node.attr)
        if isinstance(node, ast.Constant) and id(node) not in docstrings:
            if isinstance(node.value, str) and "PREFECT__" in node.value:
                found.append(node.value)
    return found


def test_no_other_module_touches_what_the_compat_module_guards():
    """Prefect's internals are imported or named in tasks/core/prefect_compat.py only."""
    touched = {
        str(path.relative_to(ROOT)): internals_touched(path)
        for package in ("tasks", "flows", "deployments")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != Path(prefect_compat.__file__)
    }
    assert {path: found for path, found in touched.items() if found} == {}
    assert internals_touched(Path(prefect_compat.__file__))  # the walker sees them there
