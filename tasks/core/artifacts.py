"""Publishing a Prefect artifact never fails a run: an artifact reports on the run, it is not
the run. The artifact functions are passed in, so this module imports nothing of Prefect."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

Logger = logging.Logger | logging.LoggerAdapter  # what Prefect's get_run_logger() returns


def publish_artifact(logger: Logger, call: Callable[..., Any], **kwargs: Any) -> Any:
    """`call(**kwargs)` (e.g. `create_table_artifact`); a failure is logged as a warning."""
    try:
        return call(**kwargs)
    except Exception as exc:  # noqa: BLE001 - see the module docstring
        what = kwargs.get("key") or kwargs.get("artifact_id") or "an"
        logger.warning("could not publish the %s artifact: %s: %s", what, type(exc).__name__, exc)
        return None
