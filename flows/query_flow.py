"""The query flows: a search recorded as a Prefect flow run, with its hits as an artifact.

`python -m flows.query` runs a search as the `query` flow when a Prefect API is configured
(or with --record), and in process otherwise; deployments (`deployments/serve.py`) serve
`query` for the Prefect UI, where the hits show in the `query-hits` table artifact.
"""

from __future__ import annotations

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.runtime import deployment

from tasks.core.artifacts import publish_artifact
from tasks.core.options import flow_parameters
from tasks.core.prefect_compat import prompt_heartbeats
from tasks.dataset.dataset import Dataset
from tasks.search.hits import Hit
from tasks.search.params import SearchParams
from tasks.search.request import QueryRequest
from tasks.search.searcher import Searcher
from tasks.search.snippet import snippet

prompt_heartbeats()  # a flow run returns when its work is done, not up to 1 s later

HITS_KEY = "query-hits"


def search_texts(index_uri: str, texts: list[str], params: SearchParams) -> list[list[Hit]]:
    """Open the dataset and its model once, then search for every text (keeping the vectors
    in memory for a batch of them)."""
    return Searcher(Dataset(index_uri), keep_vectors=len(texts) > 1).search_many(texts, params)


search_task = task(name="search", retries=1, cache_policy=NO_CACHE)(search_texts)


@flow(name="query")
@flow_parameters(QueryRequest)
def query(request: QueryRequest) -> list[Hit]:
    """The k best chunks for `text`.

    `artifact` publishes the hits as a table artifact; by default only deployment runs do.
    """
    params = request.narrow(SearchParams)
    logger = get_run_logger()
    logger.info("query %r on %s with %s", request.text, request.index_uri, params.describe())
    hits = search_task(request.index_uri, [request.text], params)[0]
    if request.artifact if request.artifact is not None else deployment.id is not None:
        publish_hits(request, params, hits)
    return hits


@flow(name="query-batch")
def query_batch(texts: list[str], index_uri: str, params: SearchParams) -> list[list[Hit]]:
    """Hits for each text, with the model and tables loaded once."""
    get_run_logger().info("%d queries on %s with %s", len(texts), index_uri, params.describe())
    return search_task(index_uri, texts, params)


def publish_hits(request: QueryRequest, params: SearchParams, hits: list[Hit]) -> None:
    """The hits as the `query-hits` table artifact; a failure to publish is only a warning."""
    from prefect.artifacts import create_table_artifact

    rows = [
        {
            "rank": rank,
            "score": round(hit.score, 4),
            "source": hit.doc_id,
            "section": hit.section,
            "page": hit.page_number,
            "snippet": snippet(hit.text, request.text, width=200),
        }
        for rank, hit in enumerate(hits, start=1)
    ]
    publish_artifact(
        get_run_logger(),
        create_table_artifact,
        key=HITS_KEY,
        table=rows,
        description=f"{len(hits)} hits for `{request.text}` in `{request.index_uri}` "
        f"({params.describe()}).",
    )
