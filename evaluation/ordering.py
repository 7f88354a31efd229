"""The order trec_eval gives a run's documents, and the tiers hidden in tied scores.

trec_eval ignores the rank column and sorts by score, descending; equal scores are ordered by
docid in *descending* lexical order (``strcmp(b, a)`` in its ``form_res_rels.c``). The tests check
this rule against trec_eval's own fixtures. Python compares ``str`` by code point, which for
UTF-8 text is the same order as ``strcmp`` on bytes.
"""

from __future__ import annotations

from collections.abc import Mapping


def rank_documents(scores: Mapping[str, float]) -> list[str]:
    """Document ids best first, in trec_eval's order (score desc, then docid desc)."""
    return sorted(scores, key=lambda docid: (scores[docid], docid), reverse=True)


def tiers_from_scores(scores: Mapping[str, float]) -> list[set[str]]:
    """Group documents with equal scores into tiers, best first."""
    tiers: list[set[str]] = []
    previous: float | None = None
    for docid in rank_documents(scores):
        if previous is None or scores[docid] != previous:
            tiers.append(set())
            previous = scores[docid]
        tiers[-1].add(docid)
    return tiers
