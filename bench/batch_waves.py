"""A large study in provider batch mode: sequential batches, cost and wall time (issue 24).

    .venv/bin/python -m tierank.bench.batch_waves [--queries 1000] [--pool 100] [--judge strong]
        [--latency 3] [--turnaround 0.5 2 24] [--seed 0] [--models openai/gpt-4.1-mini ...]

Provider batch execution is not built yet (server/judges/batches/ has the transports); this is
the model of what it will cost and how long it will take. A study of `--queries` queries, each
the BM25 top-`--pool` of a DL19 query (query i is DL19's i mod 43 at seed `--seed` + i div 43,
so the first 860 are exactly section 5's runs of tierank and BlitzRank-k10 with that judge),
top-10, k=10, the scheduler at its defaults and the benchmark's simulated judge
(bench/ranking/judges.py, server/judges/simulated.py). Every query's tournament runs side by
side, in waves: each live tournament gets the answers to all the calls it has in flight, then
plans; a wave is one provider batch per judge, split only where the vendor's declared limits
require (the transports' own `payloads`, on each call's real batch entry: the server's prompt
rendered by the vendor's judge). Counted: the sequential waves until every query ends, each
query's critical path, calls and tokens.

BlitzRank (published, k=10; bench/ranking/blitzrank_published.py) runs on the same queries
with the same judge. Its rounds are strictly sequential within a query (one call each), so in
batch mode its queries' rounds go side by side and the study takes as many waves as its
slowest query has rounds.

Cost: each call's input tokens are its rendered prompt at the server's 4 characters a token
(judges.prompt.estimate_tokens; real tokenizers differ by some 10-20%), its output
OUTPUT_TOKENS_PER_PASSAGE a passage shown ("[12] > " is about 4 tokens: judges/llm.py); charged
at the default price table call by call and at its batch price (prices.batch_price).

Wall time: batch mode takes waves x the assumed turnaround of one batch (`--turnaround`,
hours; 24 h is the vendors' completion window, after which a request expires). Call by call, a
query takes critical path x `--latency` (one round-trip per round, rate limits ignored), and a
study keeps `max_live` queries side by side, starting the next query as one ends (the default
and the cap of limits.py, DEFAULT_LIVE_QUERIES and MAX_LIVE_QUERIES, and all). Batch mode
needs every query live at once; at the current cap of MAX_LIVE_QUERIES the waves are the same
slot schedule counted in waves.
The last waves carry few calls (a study waits for its slowest query), so a variant is shown
too: the first waves batched, up to the 90th percentile of the rounds per query, and what is
left of the study call by call, every remaining query live (its cost: those calls at the
per-call price; its time: the remaining rounds at `--latency`). Not modelled: expired or failed
batch requests (each would add a wave for its query) and prompt caching (section 13).
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import statistics
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tierank.bench.ranking.blitzrank_published import rank_blitzrank_published
from tierank.bench.ranking.data import Query, load_queries
from tierank.bench.ranking.judges import PANELS, QueryWorld, SimulatedJudge
from tierank.bench.ranking.session import JudgeSession
from tierank.bench.ranking.tournament_driver import MAX_WAVES
from tierank.client.commands._shared import positive_float, positive_int
from tierank.limits import DEFAULT_LIVE_QUERIES, MAX_LIVE_QUERIES
from tierank.scheduler import Cost, JudgeCall, Tournament, TournamentConfig, Verdict
from tierank.server.judges.base import BatchRequest, JudgeConfig, Passage, PoolContext
from tierank.server.judges.batches import BATCH_PROVIDERS, transport_for
from tierank.server.judges.batches.base import PAYLOAD_OVERHEAD_BYTES, BatchCall, BatchTransport
from tierank.server.judges.llm import LLMJudge
from tierank.server.judges.prices import TokenCounts, batch_price, cost_usd
from tierank.server.judges.prompt import estimate_tokens
from tierank.server.judges.registry import JudgeFactory
from tierank.server.judges.settings import JudgeSettings, ProviderSettings
from tierank.server.judges.simulated import seeded_rng

MODELS = ("openai/gpt-4.1-mini", "anthropic/claude-sonnet-4-5", "gemini/gemini-2.5-flash")
TURNAROUND_HOURS = (0.5, 2.0, 24.0)
CALL_LATENCY_S = 3.0
OUTPUT_TOKENS_PER_PASSAGE = 4
# The judges are built only to render batch entries: no request is ever sent.
UNUSED_ENDPOINT = "http://127.0.0.1:9"
# Section 5's method names: the judge-noise streams of the same runs.
TIERANK, BLITZRANK = "tierank", "blitzrank-k10"


@dataclass(frozen=True)
class StudyQuery:
    index: int
    query: Query
    seed: int


def study_queries(queries: Sequence[Query], count: int, seed: int) -> list[StudyQuery]:
    """`count` queries cycling over `queries`, each pass at the next seed."""
    return [
        StudyQuery(i, queries[i % len(queries)], seed + i // len(queries)) for i in range(count)
    ]


def judge_session(
    item: StudyQuery, judge: str, method: str, kind: type[JudgeSession] = JudgeSession
) -> JudgeSession:
    """The benchmark's session of `method` on this query and seed (experiment.run_task's)."""
    (profile,) = PANELS[judge]
    return kind(
        item.query,
        QueryWorld(item.query, item.seed),
        [SimulatedJudge(profile)],
        seeded_rng(item.seed, "judge-noise", judge, method, item.query.qid),
    )


@dataclass(frozen=True)
class WaveCall:
    """One judge call of a wave: which study query, which passages."""

    query: int
    presented: tuple[str, ...]


@dataclass(frozen=True)
class QueryOutcome:
    # The wave of its first calls (1-based); the number of waves with its calls after it.
    start_wave: int
    rounds: int
    # The scheduler's own counts.
    critical_path: int
    calls: int
    stop: str


@dataclass
class WaveStudy:
    waves: list[list[WaveCall]] = field(default_factory=list)
    queries: dict[int, QueryOutcome] = field(default_factory=dict)


@dataclass
class _Live:
    item: StudyQuery
    tournament: Tournament
    session: JudgeSession
    calls: list[JudgeCall]
    start_wave: int
    rounds: int = 0


def _next_calls(tournament: Tournament) -> list[JudgeCall]:
    """The calls of the query's next wave; [] once it ends (as tournament_driver stops)."""
    return [] if tournament.stop_reason() is not None else tournament.plan()


def run_tierank_waves(
    study: Sequence[StudyQuery], judge: str = "strong", live: int | None = None
) -> WaveStudy:
    """Every query's tournament side by side, at most `live` at once (default all), in waves."""
    result = WaveStudy()
    waiting = deque(study)
    in_flight: dict[int, _Live] = {}
    slots = live or len(study)
    while waiting or in_flight:
        wave_number = len(result.waves) + 1
        while waiting and len(in_flight) < slots:
            item = waiting.popleft()
            config = TournamentConfig(judge_weights=(1.0,), seed=item.seed)
            tournament = Tournament(list(item.query.candidates), config)
            query = _Live(item, tournament, judge_session(item, judge, TIERANK), [], wave_number)
            query.calls = _next_calls(tournament)
            if query.calls:
                in_flight[item.index] = query
            else:
                result.queries[item.index] = _outcome(query)
        if not in_flight:
            break
        result.waves.append(
            [WaveCall(index, call.presented) for index, q in in_flight.items() for call in q.calls]
        )
        for index, query in list(in_flight.items()):
            answers = query.session.ask_round(
                [(call.judge, call.presented) for call in query.calls]
            )
            for call, answer in zip(query.calls, answers, strict=True):
                query.tournament.record(
                    Verdict(call.call_id, answer or (), failed=answer is None, cost=Cost(calls=1))
                )
            query.rounds += 1
            if query.rounds > MAX_WAVES:
                raise RuntimeError(f"query {index} neither ends nor stops planning")
            query.calls = _next_calls(query.tournament)
            if not query.calls:
                result.queries[index] = _outcome(query)
                del in_flight[index]
    return result


def _outcome(query: _Live) -> QueryOutcome:
    tournament = query.tournament
    return QueryOutcome(
        start_wave=query.start_wave,
        rounds=query.rounds,
        critical_path=tournament.critical_path,
        calls=tournament.spent.calls,
        stop=str(tournament.stop_reason()),
    )


class _RecordingSession(JudgeSession):
    """A session that keeps each round's presented batches, to charge them with the server's
    prompt rather than the benchmark's."""

    def __init__(
        self,
        query: Query,
        world: QueryWorld,
        judges: Sequence[SimulatedJudge],
        rng: np.random.Generator,
    ) -> None:
        super().__init__(query, world, judges, rng)
        self.rounds: list[list[tuple[str, ...]]] = []

    def ask_round(
        self, requests: Sequence[tuple[int, Sequence[str]]]
    ) -> list[tuple[str, ...] | None]:
        if requests:
            self.rounds.append([tuple(presented) for _, presented in requests])
        return super().ask_round(requests)


def run_blitzrank_waves(study: Sequence[StudyQuery], judge: str = "strong") -> WaveStudy:
    """BlitzRank (published, k=10) on every query, its rounds side by side as waves."""
    result = WaveStudy()
    for item in study:
        session = judge_session(item, judge, BLITZRANK, _RecordingSession)
        assert isinstance(session, _RecordingSession)
        rank_blitzrank_published(session, k=10, top_m=10)
        for round_number, presented in enumerate(session.rounds):
            if round_number == len(result.waves):
                result.waves.append([])
            result.waves[round_number] += [WaveCall(item.index, batch) for batch in presented]
        rounds = session.ledger.critical_path
        result.queries[item.index] = QueryOutcome(1, rounds, rounds, session.ledger.calls, "")
    return result


def slot_schedule(durations: Sequence[float], slots: int) -> float:
    """When the last of `durations` ends, each started in order as soon as one of `slots` is
    free: a study's wall time with `slots` queries live at once (in waves or in seconds)."""
    free = [0.0] * max(1, min(slots, len(durations)))
    end = 0.0
    for duration in durations:
        start = heapq.heappop(free)
        heapq.heappush(free, start + duration)
        end = max(end, start + duration)
    return end


def percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


# -- what the waves cost, per vendor -------------------------------------------------------


@dataclass(frozen=True)
class VendorBill:
    model: str
    tokens: TokenCounts
    # Provider batches submitted over all waves, and the largest (requests, bytes).
    batches: int
    largest_requests: int
    largest_bytes: int
    per_call_usd: float
    batch_usd: float


def build_transports(models: Sequence[str]) -> tuple[JudgeFactory, list[BatchTransport[Any]]]:
    """Each model's batch transport on a judge that is never asked anything (no key is real)."""
    providers = {model.partition("/")[0] for model in models}  # batch APIs' (main checks)
    settings = JudgeSettings(
        providers={
            provider: ProviderSettings(api_key="unused", base_url=UNUSED_ENDPOINT)
            for provider in providers
        }
    )
    factory = JudgeFactory(settings)
    transports = []
    for model in models:
        provider, _, name = model.partition("/")
        judge = factory.build(JudgeConfig(provider=provider, model=name), PoolContext("", "", ()))
        assert isinstance(judge, LLMJudge)
        transports.append(transport_for(judge))
    return factory, transports


def bill(
    study: Sequence[StudyQuery], waves: Sequence[Sequence[WaveCall]], transport: BatchTransport[Any]
) -> VendorBill:
    by_index = {item.index: item.query for item in study}
    judge = transport.judge
    tokens = TokenCounts()
    batches = largest_requests = largest_bytes = 0
    for wave_number, wave in enumerate(waves, start=1):
        calls = []
        for number, call in enumerate(wave):
            query = by_index[call.query]
            passages = tuple(Passage(pid, query.passages[pid]) for pid in call.presented)
            custom_id = f"q{call.query}-w{wave_number}-c{number}"
            request = BatchRequest(custom_id, query.text, "", passages)
            calls.append(BatchCall(custom_id, request))
            prompt = judge.ranking_call(request).prompt
            tokens += TokenCounts(
                input=estimate_tokens(prompt.text), output=OUTPUT_TOKENS_PER_PASSAGE * len(passages)
            )
        for payload in transport.payloads(calls):
            batches += 1
            largest_requests = max(largest_requests, len(payload))
            size = PAYLOAD_OVERHEAD_BYTES + sum(transport.entry_bytes(call) for call in payload)
            largest_bytes = max(largest_bytes, size)
    model = f"{transport.provider}/{judge.config.model}"
    return VendorBill(
        model,
        tokens,
        batches,
        largest_requests,
        largest_bytes,
        per_call_usd=cost_usd(tokens, judge.price),
        batch_usd=cost_usd(tokens, batch_price(transport.provider, judge.price)),
    )


def bills(
    study: Sequence[StudyQuery], waves: Sequence[Sequence[WaveCall]], models: Sequence[str]
) -> list[VendorBill]:
    factory, transports = build_transports(models)
    try:
        return [bill(study, waves, transport) for transport in transports]
    finally:
        asyncio.run(factory.aclose())


# -- the report ------------------------------------------------------------------------------


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 3600 else f"{seconds / 3600:.1f} h"


def report(args: argparse.Namespace) -> None:
    study = study_queries(load_queries(depth=args.pool), args.queries, args.seed)
    tierank = run_tierank_waves(study, args.judge)
    blitzrank = run_blitzrank_waves(study, args.judge)
    methods = {"tierank": tierank, "BlitzRank k=10 (published)": blitzrank}
    print(
        f"{args.queries} queries (DL19 x seeds {args.seed}..{args.seed + (args.queries - 1) // 43}"
        f"), BM25 top-{args.pool}, top-10, k=10, {args.judge} judge; batch mode: every query live"
    )
    print()
    print(
        "| method | calls per query | waves (sequential batches) | rounds per query: mean / "
        f"p50 / p90 / p99 / max | waves at max_live {MAX_LIVE_QUERIES} |"
    )
    print("|---|---|---|---|---|")
    for name, run in methods.items():
        rounds = [q.rounds for q in run.queries.values()]
        calls = [q.calls for q in run.queries.values()]
        capped = slot_schedule(rounds, MAX_LIVE_QUERIES)
        spread = " / ".join(f"{percentile(rounds, s):.0f}" for s in (0.5, 0.9, 0.99, 1.0))
        print(
            f"| {name} | {statistics.mean(calls):.1f} | {len(run.waves)} | "
            f"{statistics.mean(rounds):.2f} / {spread} | {capped:.0f} |"
        )
    print()
    histogram = Counter(q.rounds for q in tierank.queries.values())
    print(
        "tierank rounds (critical path) per query: "
        + ", ".join(f"{rounds}: {count}" for rounds, count in sorted(histogram.items()))
    )
    print("tierank calls per wave: " + ", ".join(str(len(wave)) for wave in tierank.waves))
    print()
    cuts = {
        name: round(percentile([q.rounds for q in run.queries.values()], 0.9))
        for name, run in methods.items()
    }
    print(
        "| method | model | input / output tokens | provider batches (largest: requests, MB) "
        "| $ call by call | $ batch | batch / call | $ first waves batched, the rest call by call |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, run in methods.items():
        cut = cuts[name]
        tails = bills(study, run.waves[cut:], args.models)
        for vendor, tail in zip(bills(study, run.waves, args.models), tails, strict=True):
            hybrid = vendor.batch_usd - tail.batch_usd + tail.per_call_usd
            print(
                f"| {name} | {vendor.model} | {vendor.tokens.input:,} / {vendor.tokens.output:,} |"
                f" {vendor.batches} ({vendor.largest_requests:,}, "
                f"{vendor.largest_bytes / 1e6:.1f}) | {vendor.per_call_usd:,.2f} | "
                f"{vendor.batch_usd:,.2f} | {vendor.batch_usd / vendor.per_call_usd:.2f} | "
                f"{hybrid:,.2f} (first {cut}; {hybrid / vendor.per_call_usd:.3f}) |"
            )
    print()
    turnarounds = " | ".join(f"batches at {t:g} h" for t in args.turnaround)
    print(
        f"| method | call by call, {args.latency:g} s a call, max_live "
        f"{DEFAULT_LIVE_QUERIES} / {MAX_LIVE_QUERIES} / all | {turnarounds} |"
    )
    print("|---|---|" + "---|" * len(args.turnaround))
    for name, run in methods.items():
        seconds = [q.rounds * args.latency for q in run.queries.values()]
        by_call = " / ".join(
            _duration(slot_schedule(seconds, live))
            for live in (DEFAULT_LIVE_QUERIES, MAX_LIVE_QUERIES, len(study))
        )
        waves, cut = len(run.waves), cuts[name]
        batch = " | ".join(f"{waves * t:g} h" for t in args.turnaround)
        print(f"| {name} | {by_call} | {batch} |")
        # The tail: the last waves' few queries, every one live, a round-trip a round.
        tail_time = _duration((waves - cut) * args.latency)
        mixed = " | ".join(f"{cut * t:g} h + {tail_time}" for t in args.turnaround)
        print(f"| {name}, first {cut} waves batched, the rest call by call | | {mixed} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queries", type=positive_int, default=1000)
    parser.add_argument(
        "--pool", type=positive_int, default=100, help="BM25 depth of each query's pool"
    )
    parser.add_argument("--judge", default="strong", choices=["strong", "weak", "oracle"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--models", nargs="+", default=list(MODELS), help="PROVIDER/MODEL, a batch API's"
    )
    parser.add_argument("--latency", type=positive_float, default=CALL_LATENCY_S, help="s per call")
    parser.add_argument(
        "--turnaround",
        type=positive_float,
        nargs="+",
        default=list(TURNAROUND_HOURS),
        help="h a batch",
    )
    args = parser.parse_args()
    unknown = {model.partition("/")[0] for model in args.models} - set(BATCH_PROVIDERS)
    if unknown:
        parser.error(f"--models: no batch API for {sorted(unknown)}: choose from {BATCH_PROVIDERS}")
    report(args)


if __name__ == "__main__":
    main()
