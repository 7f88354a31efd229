"""Top-k selection by heap sort with a pluggable sift-down, shared by the heap-based baselines."""

from __future__ import annotations

from collections.abc import Callable, Sequence

# sift_down(heap, node, size): restore the heap property below ``node`` in ``heap[:size]``.
SiftDown = Callable[[list[str], int, int], None]


def heap_select(items: Sequence[str], fanout: int, top_k: int, sift_down: SiftDown) -> list[str]:
    """The top ``top_k`` best first, then the rest in their given order."""
    heap = list(items)
    size = len(heap)
    for node in range((size - 2) // fanout, -1, -1):
        sift_down(heap, node, size)
    top: list[str] = []
    while size and len(top) < top_k:
        top.append(heap[0])
        size -= 1
        heap[0], heap[size] = heap[size], heap[0]
        # The heap after the last pop is never read: sifting it would waste calls.
        if len(top) < top_k:
            sift_down(heap, 0, size)
    chosen = set(top)
    return top + [pid for pid in items if pid not in chosen]
