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
wall time of a question without a Prefect API. That reading re-derives Prefect's internals,
so it is in tasks/core/prefect_compat.py, which tests/test_prefect_compat.py checks against
Prefect's own. Moving the home folder would hide the user's profiles file, so it is named
explicitly.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tasks.core import prefect_compat
from tasks.core.prefect_compat import environment_names, profiles_file, read_toml

PROJECT_SETTINGS = Path(__file__).resolve().parents[1] / "prefect.toml"


def user_settings(cwd: Path) -> dict[str, Any]:
    """The Prefect settings the user has set where Prefect would read them, with their
    values (the first source Prefect would take wins); the repository's prefect.toml is
    doc-indexer's, not the user's."""
    return prefect_compat.user_settings(cwd, PROJECT_SETTINGS)


def configured_api_url(cwd: Path | None = None) -> str | None:
    """The Prefect API the user pointed doc-indexer at, if any (without importing Prefect):
    where a command's flow runs are recorded instead of in a temporary server."""
    url = user_settings(cwd or Path.cwd()).get("PREFECT_API_URL")
    return str(url) if url else None


def apply(cwd: Path | None = None) -> dict[str, str]:
    """Set the project's Prefect settings the user has not set; returns what was set."""
    ours = environment_names(read_toml(PROJECT_SETTINGS))
    taken = user_settings(cwd or Path.cwd())
    applied: dict[str, str] = {}
    profiles = profiles_file(taken)
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
