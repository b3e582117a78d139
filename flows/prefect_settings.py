"""doc-indexer's Prefect settings, whatever folder a command runs from.

Prefect reads `prefect.toml` from the working directory only: run from another folder, a
command would keep its state in ~/.prefect and give a temporary API server Prefect's default
20 s to start, which is not always enough on a small machine. Importing `flows` therefore
applies the repository's `prefect.toml` (the one declaration of these settings) as
environment defaults, before Prefect is imported.

A user's own settings win: a setting is left alone when it is set in one of the sources
Prefect's settings documentation lists, read here in Prefect's order: the environment, then
`.env`, `prefect.toml` and `pyproject.toml` (`[tool.prefect]`) of the working directory, then
the active profile. They are read without Prefect: its settings are fixed once it is
imported, and importing `prefect.settings` (all of `prefect`) would be more than half the
wall time of a question without a Prefect API. tests/test_prefect_settings.py checks this
reading against Prefect's own. Moving the home folder would hide the user's profiles file,
so it is named explicitly.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

PROJECT_SETTINGS = Path(__file__).resolve().parents[1] / "prefect.toml"


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


def _read(path: Path) -> dict[str, Any]:
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


def _profiles_file(found: dict[str, Any]) -> Path | None:
    """The user's Prefect profiles file, where Prefect would look for it."""
    if found.get("PREFECT_PROFILES_PATH"):
        return Path(found["PREFECT_PROFILES_PATH"])
    home = Path(os.environ.get("PREFECT_HOME", Path.home() / ".prefect")).expanduser()
    path = home / "profiles.toml"
    return path if path.is_file() else None


def _profile(profiles: Path | None) -> dict[str, Any]:
    """The settings of the active profile in `profiles`."""
    document = _read(profiles) if profiles is not None else {}
    active = os.environ.get("PREFECT_PROFILE") or document.get("active", "ephemeral")
    return dict(document.get("profiles", {}).get(active, {}))


def user_settings(cwd: Path) -> dict[str, Any]:
    """The Prefect settings the user has set where Prefect would read them, with their
    values (the first source Prefect would take wins)."""
    found = environment_names(_read(cwd / "pyproject.toml").get("tool", {}).get("prefect", {}))
    local = cwd / "prefect.toml"
    if local.is_file() and local.resolve() != PROJECT_SETTINGS:
        found |= environment_names(_read(local))
    found |= _dotenv(cwd) | _prefect_variables(os.environ)
    return _profile(_profiles_file(found)) | found


def configured_api_url(cwd: Path | None = None) -> str | None:
    """The Prefect API the user pointed doc-indexer at, if any (without importing Prefect):
    where a command's flow runs are recorded instead of in a temporary server."""
    url = user_settings(cwd or Path.cwd()).get("PREFECT_API_URL")
    return str(url) if url else None


def apply(cwd: Path | None = None) -> dict[str, str]:
    """Set the project's Prefect settings the user has not set; returns what was set."""
    ours = environment_names(_read(PROJECT_SETTINGS))
    taken = user_settings(cwd or Path.cwd())
    applied: dict[str, str] = {}
    profiles = _profiles_file(taken)
    if "PREFECT_HOME" not in taken and profiles is not None:
        applied["PREFECT_PROFILES_PATH"] = str(profiles)  # keep the user's profiles in view
    for name, value in ours.items():
        if name in taken:
            continue
        if name == "PREFECT_HOME":
            value = PROJECT_SETTINGS.parent / Path(value).expanduser()
        applied[name] = str(value).lower() if isinstance(value, bool) else str(value)
    os.environ.update(applied)
    return applied
