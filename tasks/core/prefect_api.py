"""Whether this process reports to a Prefect API that other machines share.

A command run without a configured Prefect API starts a temporary server of its own
(flows/temporary_server.py): it points PREFECT_API_URL at that server and names it in
TEMPORARY_API_ENV too, and child processes inherit both. Any other API (`prefect server
start`, Prefect Cloud, a test's server) may be shared, so what is kept there, such as a
dataset's lock (tasks/dataset/prefect_lock.py), is seen by every machine pointed at it.

Light on purpose: the temporary server imports TEMPORARY_API_ENV before Prefect is imported.
"""

from __future__ import annotations

import os

TEMPORARY_API_ENV = "DOC_INDEXER_TEMPORARY_API_URL"


def shared_api_url() -> str | None:
    """The Prefect API this process reports to, as Prefect has it (the environment, a
    profile, a test's settings); None without one or when it is a command's temporary
    server."""
    from prefect.settings import get_current_settings  # imports Prefect: callers run flows

    url = get_current_settings().api.url
    if not url or url == os.environ.get(TEMPORARY_API_ENV):
        return None
    return str(url)
