"""The lock of an object-store dataset with a shared Prefect API: a global concurrency limit.

The limit (`limit_name`: "doc-indexer:" and the dataset's URI, Prefect's banned characters
replaced, and a digest of it) has one slot and is created, active, by the first run that
needs it. A run takes the slot with a lease (Prefect's `concurrency`, strict: a limit that
cannot be taken is an error, never skipped), which Prefect renews in the background; the
server frees the slot of a holder that stopped renewing (crashed, killed) once the lease has
run out. Prefect's UI lists the limit with its active slot under Concurrency.

Prefect does not say who holds a slot, so the holder (`tasks.dataset.holders.Holder`) is also
recorded in a Prefect variable (`holder_variable`), removed on release: a waiting run names
it. Prefect takes leases of at least MIN_LEASE_S.

Here, not in flows/: `Dataset.lock` chooses the lock from the dataset's location, and
tasks.dataset may use Prefect's public API but not import flows.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING
from uuid import UUID

from tasks.dataset.holders import Holder, Logger, say_waiting, timed_out
from tasks.dataset.location import DatasetError, uri_digest

if TYPE_CHECKING:
    from prefect.client.orchestration import SyncPrefectClient

MIN_LEASE_S = 60.0  # the shortest lease Prefect's server grants
PREFIX = "doc-indexer"
BANNED = re.compile(r"[/%&<>]+")  # characters Prefect's names may not have


def limit_name(uri: str) -> str:
    """The concurrency limit of the dataset at `uri`: doc-indexer:s3:bucket:idx:1a2b3c4d5e6f7a8b."""
    readable = BANNED.sub(":", uri.rstrip("/").replace("://", ":"))
    return f"{PREFIX}:{readable}:{uri_digest(uri)}"


def holder_variable(uri: str) -> str:
    """The Prefect variable naming the holder of the dataset's limit (lower case, digits,
    dashes and underscores only)."""
    return f"{PREFIX}-lock-{uri_digest(uri)}"


@contextmanager
def prefect_lock(uri: str, timeout: float, logger: Logger, lease_s: float) -> Iterator[None]:
    """Hold the slot of the dataset's concurrency limit (see the module doc)."""
    from prefect import get_client
    from prefect.client.schemas.objects import ConcurrencyLeaseHolder
    from prefect.concurrency.asyncio import ConcurrencySlotAcquisitionError
    from prefect.concurrency.sync import concurrency
    from prefect.variables import Variable

    name, variable = limit_name(uri), holder_variable(uri)
    with get_client(sync_client=True) as client:
        if _ensure_limit(client, name) > 0:
            say_waiting(logger, uri, _recorded_holder(variable), timeout)
    run_id = Holder.this_process().run_id  # Prefect records the flow run with the lease
    lease_holder = ConcurrencyLeaseHolder(type="flow_run", id=UUID(run_id)) if run_id else None
    with ExitStack() as stack:
        slot = concurrency(
            name,
            timeout_seconds=timeout if timeout > 0 else None,
            max_retries=0 if timeout == 0 else None,  # 0: one try (a passed deadline: none)
            lease_duration=max(lease_s, MIN_LEASE_S),
            strict=True,
            holder=lease_holder,
        )
        try:
            stack.enter_context(slot)
        except TimeoutError:
            raise timed_out(uri, timeout, _recorded_holder(variable)) from None
        except ConcurrencySlotAcquisitionError as exc:
            if timeout == 0:  # taken meanwhile: Prefect's refusal to wait
                raise timed_out(uri, timeout, _recorded_holder(variable)) from None
            raise DatasetError(f"cannot take the Prefect concurrency limit {name}: {exc}") from None
        try:
            holder = Holder.this_process()  # since now
            Variable.set(variable, holder.as_dict(), overwrite=True)
            stack.callback(Variable.unset, variable)  # before the slot is released
            logger.info("holding the lock of %s: Prefect concurrency limit %s", uri, name)
            yield
        finally:
            stack.close()
            logger.info("released the lock of %s: Prefect concurrency limit %s", uri, name)


def _ensure_limit(client: SyncPrefectClient, name: str) -> int:
    """Create the limit `name` (active, one slot) if it is missing; its active slots."""
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    try:
        limit = client.read_global_concurrency_limit_by_name(name)
    except ObjectNotFound:
        try:
            client.create_global_concurrency_limit(
                GlobalConcurrencyLimitCreate(name=name, limit=1, active=True)
            )
        except ObjectAlreadyExists:  # another run created it meanwhile
            pass
        return 0
    if not limit.active or limit.limit != 1:
        raise DatasetError(
            f"the Prefect concurrency limit {name} that keeps runs on this dataset apart must be "
            f"active with one slot (it is {'active' if limit.active else 'inactive'} with "
            f"{limit.limit}); set it with: prefect gcl update {name} --limit 1 --enable"
        )
    return limit.active_slots


def _recorded_holder(variable: str) -> Holder | None:
    from prefect.variables import Variable

    return Holder.from_dict(Variable.get(variable))
