"""The project's Prefect settings apply from any folder, and a user's own settings still win
(that they are read where and in the order Prefect reads them: tests/test_prefect_compat.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from flows import prefect_settings
from tasks.core import prefect_compat

from .conftest import ROOT

PROBE = (
    "import flows\n"
    "from prefect.settings import get_current_settings\n"
    "s = get_current_settings()\n"
    "print(s.home, s.server.ephemeral.startup_timeout_seconds, s.logging.level)\n"
)


def test_prefect_toml_tables_become_prefect_variable_names():
    names = prefect_compat.environment_names(
        {"home": ".prefect", "server": {"ephemeral": {"startup_timeout_seconds": 120}}}
    )
    assert names == {
        "PREFECT_HOME": ".prefect",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": 120,
    }


def test_defaults_apply_where_the_user_has_set_nothing(clean_env, tmp_path):
    applied = prefect_settings.apply(cwd=tmp_path)
    assert applied["PREFECT_HOME"] == str(ROOT / ".prefect")
    assert applied["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] == "120"
    assert applied["PREFECT_SERVER_ANALYTICS_ENABLED"] == "false"
    assert os.environ["PREFECT_LOGGING_LEVEL"] == "INFO"


def test_the_users_environment_folder_and_profile_win(clean_env, tmp_path):
    clean_env["PREFECT_LOGGING_LEVEL"] = "DEBUG"
    (tmp_path / "prefect.toml").write_text("[server.ephemeral]\nstartup_timeout_seconds = 45\n")
    profiles = tmp_path / "user-home" / ".prefect" / "profiles.toml"
    profiles.parent.mkdir(parents=True)
    profiles.write_text(
        'active = "mine"\n[profiles.mine]\nPREFECT_SERVER_ANALYTICS_ENABLED = "true"\n'
    )
    applied = prefect_settings.apply(cwd=tmp_path)
    assert os.environ["PREFECT_LOGGING_LEVEL"] == "DEBUG"
    for name in (
        "PREFECT_LOGGING_LEVEL",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS",
        "PREFECT_SERVER_ANALYTICS_ENABLED",
    ):
        assert name not in applied, name
    assert applied["PREFECT_PROFILES_PATH"] == str(profiles), "the profile stays in view"
    assert applied["PREFECT_HOME"] == str(ROOT / ".prefect")


def run_probe(cwd: Path, probe: str = PROBE, **env: str) -> str:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=cwd,
        env={**base, "HOME": str(cwd), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.split("\n")[0]


def test_a_command_in_another_folder_sees_the_project_settings(tmp_path):
    assert run_probe(tmp_path) == f"{ROOT / '.prefect'} 120 INFO"
    assert run_probe(tmp_path, PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="33").startswith(
        f"{ROOT / '.prefect'} 33"
    )


def test_an_api_url_in_the_folders_env_file_is_honoured(tmp_path):
    """A PREFECT_API_URL in `.env` is where the command's runs go: no temporary server."""
    (tmp_path / ".env").write_text("PREFECT_API_URL=http://127.0.0.1:4299/api\n")
    probe = (
        "import flows\n"
        "from flows import temporary_server\n"
        "server = temporary_server.start()\n"
        "from prefect.settings import get_current_settings\n"
        "print(server, get_current_settings().api.url)\n"
    )
    assert run_probe(tmp_path, probe) == "None http://127.0.0.1:4299/api"
