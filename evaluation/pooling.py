"""TREC pooling: the documents of a query that get judged are the union of every system's top d.

Each pooled document remembers which systems retrieved it within their top d, and at what
1-based rank in trec_eval's order (:func:`tierank.evaluation.ordering.rank_documents`: score
descending, then docid descending), whatever the rank column of the run file said.

A query's pool is ordered by the best rank any system gave the document, then by how many
systems retrieved it (more first), then by docid (ascending). That order is the candidate order
of the query's tournament, where retrieval order breaks ties, so it must not depend on anything
but the runs: documents every system puts first come first, and the order is the same on every
machine and in every process.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from tierank.evaluation.formats import Run
from tierank.evaluation.ordering import rank_documents


@dataclass(frozen=True)
class PooledDocument:
    """One pooled document: system name -> its 1-based rank there (only systems that retrieved
    it within the pool depth; names in sorted order)."""

    docid: str
    retrieved_by: dict[str, int]

    @property
    def best_rank(self) -> int:
        return min(self.retrieved_by.values())


@dataclass(frozen=True)
class PoolAdditions:
    """What a run added to a study later contributes to its pool.

    ``added[qid]``: the documents of the run's top d that the pool lacks (the holes, the only
    ones that need judging), in pool order, each retrieved by this system alone so far.
    ``updated[qid]``: the documents already pooled that the run also retrieved, their
    ``retrieved_by`` now including the run. A query appears in either only where it has such
    documents; a query the pool did not have at all has all of the run's top d in ``added``.
    """

    system: str
    added: dict[str, list[PooledDocument]]
    updated: dict[str, list[PooledDocument]]

    def merged_into(
        self, pooled: Mapping[str, list[PooledDocument]]
    ) -> dict[str, list[PooledDocument]]:
        """The pool with the run in it: what :func:`pool_runs` makes of all the runs together."""
        merged: dict[str, list[PooledDocument]] = {}
        for qid in sorted(set(pooled) | set(self.added)):
            replaced = {document.docid: document for document in self.updated.get(qid, [])}
            documents = [replaced.get(d.docid, d) for d in pooled.get(qid, [])]
            merged[qid] = _pool_order(documents + self.added.get(qid, []))
        return merged


def pool_runs(runs: Mapping[str, Run], depth: int) -> dict[str, list[PooledDocument]]:
    """Pool ``runs`` (system name -> run) to ``depth``: query id -> its pool, in pool order.

    Queries in sorted order; a query no system retrieved anything for has no pool.
    """
    _check_depth(depth)
    ranks: dict[str, dict[str, dict[str, int]]] = {}
    for system in sorted(runs):
        for qid, docid, rank in _top_documents(runs[system], depth):
            ranks.setdefault(qid, {}).setdefault(docid, {})[system] = rank
    return {
        qid: _pool_order(
            [PooledDocument(docid, by_system) for docid, by_system in ranks[qid].items()]
        )
        for qid in sorted(ranks)
    }


def pool_additions(
    pooled: Mapping[str, list[PooledDocument]], run: Run, system: str, depth: int
) -> PoolAdditions:
    """What ``run``, added later as ``system``, contributes to ``pooled`` (made to ``depth``).

    A system already in the pool is refused (ValueError): its documents would be counted twice.
    """
    _check_depth(depth)
    if any(system in d.retrieved_by for documents in pooled.values() for d in documents):
        raise ValueError(f"system {system!r} is already in the pool")
    added: dict[str, list[PooledDocument]] = {}
    updated: dict[str, list[PooledDocument]] = {}
    pooled_by_docid = {
        qid: {document.docid: document for document in documents}
        for qid, documents in pooled.items()
    }
    for qid, docid, rank in _top_documents(run, depth):
        existing = pooled_by_docid.get(qid, {}).get(docid)
        if existing is None:
            added.setdefault(qid, []).append(PooledDocument(docid, {system: rank}))
        else:
            retrieved_by = dict(sorted({**existing.retrieved_by, system: rank}.items()))
            updated.setdefault(qid, []).append(PooledDocument(docid, retrieved_by))
    return PoolAdditions(
        system,
        {qid: _pool_order(added[qid]) for qid in sorted(added)},
        {qid: _pool_order(updated[qid]) for qid in sorted(updated)},
    )


def judged_share(
    run: Run, judged: Mapping[str, Collection[str]], queries: Collection[str], cutoff: int = 10
) -> float | None:
    """How much of `run`'s top `cutoff` per query a pool judged (`judged`: query id -> the
    documents that have a label), as ir-measures' Judged@cutoff (over min(cutoff, documents
    retrieved)), averaged over the `queries` the run retrieved anything for; None if none."""
    shares = []
    for qid in sorted(set(queries) & set(run)):
        top = rank_documents(run[qid])[:cutoff]
        if top:
            labelled = judged.get(qid, ())
            shares.append(sum(1 for docid in top if docid in labelled) / len(top))
    return sum(shares) / len(shares) if shares else None


def _check_depth(depth: int) -> None:
    if depth < 1:
        raise ValueError(f"pool depth must be at least 1, got {depth}")


def _top_documents(run: Run, depth: int) -> list[tuple[str, str, int]]:
    """(qid, docid, 1-based rank) of each query's top ``depth`` documents."""
    return [
        (qid, docid, rank)
        for qid in sorted(run)
        for rank, docid in enumerate(rank_documents(run[qid])[:depth], start=1)
    ]


def _pool_order(documents: list[PooledDocument]) -> list[PooledDocument]:
    ordered = sorted(documents, key=lambda d: (d.best_rank, -len(d.retrieved_by), d.docid))
    return [PooledDocument(d.docid, dict(sorted(d.retrieved_by.items()))) for d in ordered]
