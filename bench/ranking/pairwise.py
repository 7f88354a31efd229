"""Pairwise ranking prompting, PRP-Sorting with a binary heap (Qin et al., 2023).

Every comparison asks the judge about the pair in both orders (two calls in one round); a
passage wins only when both answers agree, otherwise (disagreement or an unparseable answer) the
pair is a tie and the heap leaves the two where they are. Comparisons are remembered, so a pair
is never paid for twice. The top ``top_k`` are popped; the rest keep their first-stage order.
"""

from __future__ import annotations

from tierank.bench.ranking.heap_select import heap_select
from tierank.bench.ranking.session import JudgeSession


def rank_pairwise_heapsort(session: JudgeSession, top_k: int = 10) -> list[str]:
    outcomes: dict[tuple[str, str], int] = {}

    def beats(a: str, b: str) -> bool:
        """True only when both presentation orders say ``a`` is more relevant than ``b``."""
        if (a, b) not in outcomes:
            answers = [x for x in session.ask_round([(0, (a, b)), (0, (b, a))]) if x is not None]
            firsts = [answer[0] for answer in answers]
            agreed = len(firsts) == 2 and firsts[0] == firsts[1]
            outcomes[(a, b)] = 0 if not agreed else 1 if firsts[0] == a else -1
            outcomes[(b, a)] = -outcomes[(a, b)]
        return outcomes[(a, b)] == 1

    def sift_down(heap: list[str], node: int, size: int) -> None:
        while True:
            left, right = 2 * node + 1, 2 * node + 2
            if left >= size:
                return
            child = right if right < size and beats(heap[right], heap[left]) else left
            if not beats(heap[child], heap[node]):
                return
            heap[node], heap[child] = heap[child], heap[node]
            node = child

    return heap_select(session.query.candidates, 2, top_k, sift_down)
