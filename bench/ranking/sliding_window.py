"""RankGPT's sliding window: one back-to-front pass of listwise windows over the ranking.

Window 20, step 10: the last 20 candidates are reordered first, then the window moves 10 places
towards the top, so a strong candidate can climb from the bottom to the top in one pass. Each
window needs the previous one's answer: every call is its own round. An unparseable answer leaves
the window as it was.
"""

from __future__ import annotations

from tierank.bench.ranking.session import JudgeSession


def rank_sliding_window(session: JudgeSession, window: int = 20, step: int = 10) -> list[str]:
    ranking = list(session.query.candidates)
    start = max(len(ranking) - window, 0)
    while True:
        shown = tuple(ranking[start : start + window])
        answer = session.ask(shown)
        if answer is not None:
            ranking[start : start + window] = answer
        if start == 0:
            return ranking
        start = max(start - step, 0)
