"""Setwise heap sort (Zhuang et al., 2023): a heap whose comparisons pick the best of a set.

Each node of the heap has ``set_size - 1`` children; sifting a node down asks the judge which of
{node, children} is most relevant (one call, shown in heap order: parent first) and swaps the
node with that child. The heap is built over the first-stage order and the top ``top_k`` are
popped; the rest keep their first-stage order. Every call depends on the previous answer, so each
is its own round. An unparseable answer keeps the parent in place.
"""

from __future__ import annotations

from tierank.bench.ranking.heap_select import heap_select
from tierank.bench.ranking.session import JudgeSession


def rank_setwise_heapsort(session: JudgeSession, set_size: int = 4, top_k: int = 10) -> list[str]:
    fanout = set_size - 1

    def sift_down(heap: list[str], node: int, size: int) -> None:
        while True:
            first = fanout * node + 1
            kids = list(range(first, min(first + fanout, size)))
            if not kids:
                return
            shown = (heap[node], *(heap[k] for k in kids))
            answer = session.ask(shown)
            if answer is None or answer[0] == heap[node]:
                return
            best = kids[shown.index(answer[0]) - 1]
            heap[node], heap[best] = heap[best], heap[node]
            node = best

    return heap_select(session.query.candidates, fanout, top_k, sift_down)
