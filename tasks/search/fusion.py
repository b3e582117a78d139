"""Combining rankings: reciprocal-rank fusion, and one hit per document."""

from __future__ import annotations

from tasks.search.hits import Hit

RRF_K = 60  # the usual rank constant of reciprocal-rank fusion (Cormack et al., 2009)


def rrf(
    rankings: list[list[Hit]],
    depth: int,
    weights: tuple[float, ...] | None = None,
    rank_constant: int = RRF_K,
) -> list[Hit]:
    """Reciprocal-rank fusion: chunks ranked by Σ weight / (rank_constant + rank) over the
    rankings (every weight 1 unless given)."""
    fused: dict[str, float] = {}
    first_seen: dict[str, Hit] = {}
    for ranking, weight in zip(rankings, weights or [1.0] * len(rankings), strict=True):
        for rank, hit in enumerate(ranking, start=1):
            score = weight / (rank_constant + rank)
            fused[hit.chunk_id] = fused.get(hit.chunk_id, 0.0) + score
            first_seen.setdefault(hit.chunk_id, hit)
    order = sorted(fused, key=lambda chunk_id: -fused[chunk_id])[:depth]
    return [first_seen[chunk_id].rescored(fused[chunk_id]) for chunk_id in order]


def best_per_doc(hits: list[Hit]) -> list[Hit]:
    """The first (best-ranked) hit of each document, in rank order."""
    best: dict[str, Hit] = {}
    for hit in hits:
        best.setdefault(hit.doc_id, hit)
    return list(best.values())
