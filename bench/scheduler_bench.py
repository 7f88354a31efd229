"""How long the scheduler takes to absorb one verdict and choose the next batches.

    .venv/bin/python -m tierank.bench.scheduler_bench [--sizes 100 1000] [--noise 2.0]
        [--seed 0] [--max-in-flight 4]
    .venv/bin/python -m tierank.bench.scheduler_bench --jobs 300 --noise 0.5

Drives a `Tournament` with a simulated noisy judge (true rank plus Gaussian noise per call, so
it contradicts itself now and then), answering in-flight calls in arrival order, and times each
record() + plan() step. Also reports total calls, the critical path (sequential round-trips)
and how many of the true top-10 the final tiers put in their first ten places.

With --jobs, instead: that many jobs shaped like service_bench's (N=100, top-10, k=10, 10 calls
in flight), driven the way the server drives them (each plan's verdicts recorded together, the
tiers listed at the start and after every plan, the final tiers and stats at the end), and the
scheduler's verdicts per CPU-second over all of them: service_bench's scheduler share, without
the server around it.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from dataclasses import dataclass

from tierank.scheduler import Cost, JudgeCall, Tournament, TournamentConfig, Verdict


@dataclass(frozen=True)
class Run:
    size: int
    top_k: int
    stop: str
    calls: int
    critical_path: int
    step_ms: list[float]
    top10_recovered: int


def noisy_judge(noise: float, seed: int):
    def answer(call: JudgeCall) -> Verdict:
        rng = random.Random(f"{seed}/{call.call_id}")
        # Candidate ids are "d<true rank>"; the retrieval order given to the tournament is shuffled.
        ordering = sorted(call.presented, key=lambda c: int(c[1:]) + rng.gauss(0, noise))
        return Verdict(call.call_id, tuple(ordering), cost=Cost(calls=1))

    return answer


def run(size: int, top_k: int, noise: float, seed: int, max_in_flight: int = 4) -> Run:
    truth = [f"d{rank}" for rank in range(size)]
    retrieval_order = list(truth)
    random.Random(seed).shuffle(retrieval_order)
    config = TournamentConfig(batch_size=10, top_k=top_k, max_in_flight=max_in_flight, seed=seed)
    tournament = Tournament(retrieval_order, config)
    judge = noisy_judge(noise, seed)

    pending = tournament.plan()
    calls, step_ms = len(pending), []
    while pending and tournament.stop_reason() is None:
        verdict = judge(pending.pop(0))
        started = time.perf_counter()
        tournament.record(verdict)
        new_calls = tournament.plan()
        step_ms.append((time.perf_counter() - started) * 1000)
        pending += new_calls
        calls += len(new_calls)

    ranked = [member for tier in tournament.tiers() for member in tier.members]
    return Run(
        size=size,
        top_k=top_k,
        stop=str(tournament.stop_reason()),
        calls=calls,
        critical_path=tournament.critical_path,
        step_ms=step_ms,
        top10_recovered=len(set(ranked[:10]) & set(truth[:10])),
    )


def run_jobs(jobs: int, noise: float, seed: int) -> tuple[int, float]:
    """Verdicts recorded and CPU seconds spent over `jobs` service-bench-shaped jobs."""
    verdicts, started = 0, time.process_time()
    for job in range(jobs):
        retrieval_order = [f"d{rank}" for rank in range(100)]
        random.Random(seed + job).shuffle(retrieval_order)
        tournament = Tournament(retrieval_order, TournamentConfig(seed=seed + job))
        judge = noisy_judge(noise, seed + job)
        tournament.tiers()
        while tournament.stop_reason() is None:
            planned = tournament.plan()
            if not planned:
                break
            for call in planned:
                tournament.record(judge(call))
            verdicts += len(planned)
            tournament.tiers()
            tournament.position_bias()
        tournament.tiers(final=True)
        tournament.judge_agreement()
        tournament.position_bias()
    return verdicts, time.process_time() - started


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--noise", type=float, default=2.0, help="judge noise, in ranks")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-in-flight", type=int, default=4)
    parser.add_argument("--jobs", type=int, help="instead: this many service-bench-shaped jobs")
    args = parser.parse_args()
    if args.jobs:
        verdicts, cpu = run_jobs(args.jobs, args.noise, args.seed)
        print(
            f"{args.jobs} jobs of N=100, top-10, k=10, noisy judge (sigma={args.noise} ranks): "
            f"{verdicts} verdicts in {cpu:.2f} CPU s, {verdicts / cpu:.0f} verdicts per CPU-second"
        )
        return

    print(
        f"k=10, max_in_flight={args.max_in_flight}, noisy judge (sigma={args.noise} ranks), "
        f"seed={args.seed}"
    )
    header = f"{'N':>5} {'mode':>6} {'median ms':>10} {'p99 ms':>8} {'steps':>6} "
    print(header + f"{'calls':>6} {'crit.path':>9} {'top10 hit':>9}  stop")
    for size in args.sizes:
        for top_k in (10, 0):
            result = run(size, top_k, args.noise, args.seed, args.max_in_flight)
            mode = f"top{top_k}" if top_k else "full"
            print(
                f"{size:>5} {mode:>6} {statistics.median(result.step_ms):>10.2f} "
                f"{percentile(result.step_ms, 0.99):>8.2f} {len(result.step_ms):>6} "
                f"{result.calls:>6} {result.critical_path:>9} {result.top10_recovered:>9}  "
                f"{result.stop}"
            )


if __name__ == "__main__":
    main()
