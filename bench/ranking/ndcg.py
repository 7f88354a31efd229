"""nDCG@k as trec_eval's ``ndcg_cut`` defines it, kept local so the benchmark has no moving parts.

Linear gain (gain = grade), discount log2(rank + 1), ideal ranking built from every judged
passage of the query (not only the retrieved ones); unjudged passages gain 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def dcg(gains: Sequence[float]) -> float:
    return sum(gain / math.log2(rank + 2) for rank, gain in enumerate(gains))


def ndcg_at(ranking: Sequence[str], qrels: Mapping[str, int], k: int = 10) -> float:
    ideal = dcg(sorted((g for g in qrels.values() if g > 0), reverse=True)[:k])
    if ideal == 0:
        return 0.0
    return dcg([max(qrels.get(pid, 0), 0) for pid in ranking[:k]]) / ideal
