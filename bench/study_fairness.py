"""Fairness with a study running: another tenant's single job, on an idle server and while a
tenant's 1,000-query study runs, side by side.

    python -m tierank.bench.study_fairness                      # 1,000 queries, 8 live, 50 ms
    python -m tierank.bench.study_fairness --max-live 64        # a heavier study
    python -m tierank.bench.study_fairness --rounds 3 --jobs-per-phase 2 --queries 300

One server process (SQLite in a fresh file, --auth keys) and two tenants made with the admin
tool as an operator makes them (no limits of their own: the server's defaults). Tenant A's
study is bench/study_scale.py's synthetic one (--queries x 3 systems, depth 20, pools of
about 40) judged by the `oracle` judge with --latency-ms per call, top-10, --max-live queries
at once, long enough to run throughout each loaded phase (the run stops if not). Tenant B's
job: --candidates candidates, top-10, k = 10, the same judge and latency, the same seed every
time (so the same calls in the same rounds: only the server's delays differ), run with Rank as
`tierank rank` does, its events streamed to the end.

Each round: B's job --jobs-per-phase times on the idle server; then A's study is started (one
of --rounds drafts uploaded before the first round), and once a first --max-live of its queries
have ended (its driver refilling slots as queries end, as until its end), B's job as many times
again; then the study is cancelled and the server left to go idle. Printed: B's job wall time
(Rank sent -> its final event) and time to its first verdict, p50 and p95 idle and loaded and
their ratios (the issue's target: loaded within 1.5x of idle); the server's CPU use over each
phase; A's judge calls and queries ended from each start to its cancel (A is served too).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tierank.bench.service_bench import cpu_seconds, member_key, percentile
from tierank.bench.study_scale import DEPTH, TOURNAMENT_LABELS, ranking_spec, synthetic_study
from tierank.client import Client, LocalServer
from tierank.client._study import chunks
from tierank.v1 import rank_pb2, study_pb2

IDLE_CPU_SHARE = 0.05  # the server counts as idle below this share of a core
IDLE_WAIT_S = 60.0
SERVER_ARGS = ("--auth", "keys", "--log-level", "warning")


@dataclass
class Run:
    """One of B's jobs."""

    wall_s: float
    first_verdict_s: float
    calls: int
    critical_path: int


def b_job_spec(candidates: int, latency_ms: float) -> rank_pb2.JobSpec:
    spec = ranking_spec(0.5, seed=7, latency_ms=latency_ms)
    spec.query = "how do solar panels work"
    spec.candidates.extend(
        rank_pb2.Candidate(
            id=f"c{i:03d}",
            text=f"passage {i} about solar cells and the light they turn into current",
            metadata={"score": str((i * 37) % 100 / 25)},
        )
        for i in range(candidates)
    )
    return spec


def run_b_job(client: Client, spec: rank_pb2.JobSpec) -> Run:
    sent = time.perf_counter()
    first_verdict = 0.0
    job = ""
    for event in client.rank(spec):
        kind = event.WhichOneof("kind")
        job = event.job
        if kind == "verdict" and not first_verdict:
            first_verdict = time.perf_counter() - sent
        elif kind in ("completed", "failed"):
            break
    wall = time.perf_counter() - sent
    stats = client.get_job(job).stats
    return Run(wall, first_verdict, stats.judge_calls, stats.critical_path)


def wait_idle(pid: int) -> float:
    """Wait until the server uses under IDLE_CPU_SHARE of a core over half a second; the
    seconds waited."""
    started = time.perf_counter()
    while time.perf_counter() - started < IDLE_WAIT_S:
        before = cpu_seconds(pid)
        time.sleep(0.5)
        if (cpu_seconds(pid) - before) / 0.5 < IDLE_CPU_SHARE:
            break
    return time.perf_counter() - started


def wait_steady(client: Client, name: str, live: int) -> None:
    """Wait until a first `live` of the study's queries have ended: its driver is then
    refilling slots as queries end, as it does until the study's end."""
    while True:
        study = client.get_study(name)
        if study.state != study_pb2.STUDY_STATE_RUNNING:
            raise SystemExit("tenant A's study ended before B's phase: give it more --queries")
        if _ended(study) >= live:
            return
        time.sleep(0.1)


def _ended(study: study_pb2.Study) -> int:
    p = study.progress
    return p.settled + p.provisional + p.failed


@dataclass
class Phase:
    """B's jobs one after another, on the idle server or with A's study running."""

    loaded: bool
    runs: list[Run]
    seconds: float
    server_cpu_share: float
    # A's study in a loaded phase: seconds from StartStudy to its cancel, its judge calls and
    # queries ended by then.
    a_seconds: float = 0.0
    a_calls: int = 0
    a_queries: int = 0


def b_phase(client: Client, spec: rank_pb2.JobSpec, count: int, loaded: bool, pid: int) -> Phase:
    cpu_before, started = cpu_seconds(pid), time.perf_counter()
    runs = [run_b_job(client, spec) for _ in range(count)]
    seconds = time.perf_counter() - started
    return Phase(loaded, runs, seconds, (cpu_seconds(pid) - cpu_before) / seconds)


def loaded_phase(
    tenant_a: Client,
    study: str,
    max_live: int,
    tenant_b: Client,
    spec: rank_pb2.JobSpec,
    count: int,
    pid: int,
) -> Phase:
    """A's study started and in full swing, B's jobs, then the study cancelled and ended."""
    started = time.perf_counter()
    tenant_a.start_study(study)
    wait_steady(tenant_a, study, max_live)
    phase = b_phase(tenant_b, spec, count, True, pid)
    if tenant_a.get_study(study).state != study_pb2.STUDY_STATE_RUNNING:
        raise SystemExit("tenant A's study ended during B's phase: give it more --queries")
    tenant_a.cancel_study(study)
    phase.a_seconds = time.perf_counter() - started
    for final in tenant_a.watch_study(study):
        phase.a_calls = final.progress.judge_calls
        phase.a_queries = _ended(final)
    return phase


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--queries", type=int, default=1000, help="tenant A's study's queries")
    parser.add_argument("--max-live", type=int, default=8, help="its max_live_queries")
    parser.add_argument("--latency-ms", type=float, default=50.0, help="judges' latency per call")
    parser.add_argument("--candidates", type=int, default=100, help="tenant B's job's candidates")
    parser.add_argument("--rounds", type=int, default=6, help="idle and loaded phases, alternating")
    parser.add_argument("--jobs-per-phase", type=int, default=4, help="B's jobs in each phase")
    args = parser.parse_args(argv)
    files = synthetic_study(args.queries, seed=0)
    study_spec = study_pb2.StudySpec(
        display_name="tenant A's study",
        depth=DEPTH,
        ranking=ranking_spec(0.5, seed=0, latency_ms=args.latency_ms),
        max_live_queries=args.max_live,
        labels=TOURNAMENT_LABELS,
    )
    b_spec = b_job_spec(args.candidates, args.latency_ms)
    phases: list[Phase] = []
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "fairness.db"
        token_a, token_b = member_key(db, "team-a"), member_key(db, "team-b")
        with (
            LocalServer(db=db, extra_args=SERVER_ARGS) as server,
            Client(server.address, api_key=token_a) as tenant_a,
            Client(server.address, api_key=token_b) as tenant_b,
        ):
            assert server.pid is not None
            pid = server.pid
            drafts = []
            for r in range(args.rounds):
                request_id = f"fairness-{r}"
                draft = tenant_a.create_study(study_spec, request_id=request_id)
                tenant_a.add_study_inputs(draft.name, chunks(files, request_id))
                drafts.append(draft.name)
            run_b_job(tenant_b, b_spec)  # warm-up: connections, imports
            count = args.jobs_per_phase
            for study in drafts:
                wait_idle(pid)
                phases.append(b_phase(tenant_b, b_spec, count, False, pid))
                wait_idle(pid)
                phases.append(
                    loaded_phase(tenant_a, study, args.max_live, tenant_b, b_spec, count, pid)
                )
                idle_s, loaded_s = (
                    statistics.median(r.wall_s for r in p.runs) for p in phases[-2:]
                )
                print(
                    f"round: B's job {idle_s:.2f} s idle, {loaded_s:.2f} s loaded", file=sys.stderr
                )
    print_results(args, phases)
    return 0


def print_results(args: argparse.Namespace, phases: list[Phase]) -> None:
    runs = [r for p in phases for r in p.runs]
    idle = [r for p in phases if not p.loaded for r in p.runs]
    loaded_runs = [r for p in phases if p.loaded for r in p.runs]
    loaded_phases = [p for p in phases if p.loaded]
    a_seconds = sum(p.a_seconds for p in loaded_phases)
    a_calls = sum(p.a_calls for p in loaded_phases)
    a_queries = sum(p.a_queries for p in loaded_phases)
    shapes = {(r.calls, r.critical_path) for r in runs}
    print(
        f"tenant A: a study of {args.queries} queries x 3 systems, depth {DEPTH}, "
        f"max_live_queries {args.max_live}, oracle {args.latency_ms:g} ms a call, started "
        f"{len(loaded_phases)} times and cancelled after B's phase: {a_seconds:.1f} s running "
        f"in all, {a_calls} judge calls ({a_calls / a_seconds:.0f}/s), {a_queries} queries ended"
    )
    print(
        f"tenant B: one job of {args.candidates} candidates, top-10, k=10, the same judge; "
        f"{args.rounds} rounds x {args.jobs_per_phase} jobs per phase, idle and loaded "
        f"alternating; (judge calls, critical path) of its runs: {sorted(shapes)}"
    )
    shares = {
        loaded: statistics.fmean(p.server_cpu_share for p in phases if p.loaded == loaded)
        for loaded in (False, True)
    }
    print(
        f"server CPU (share of one core) during B's phases: idle {shares[False]:.2f}, "
        f"loaded {shares[True]:.2f}"
    )
    print(f"{'tenant B':<26}{'idle':>9}{'loaded':>9}{'ratio':>8}")
    for label, attribute in (
        ("job wall s", "wall_s"),
        ("time to first verdict s", "first_verdict_s"),
    ):
        for q_label, q in (("p50", 0.5), ("p95", 0.95)):
            a = percentile([getattr(r, attribute) for r in idle], q)
            b = percentile([getattr(r, attribute) for r in loaded_runs], q)
            print(f"{label + ' ' + q_label:<26}{a:>9.3f}{b:>9.3f}{b / a:>8.2f}")
    print(
        "B's runs (s), idle: "
        + ", ".join(f"{r.wall_s:.2f}" for r in idle)
        + "; loaded: "
        + ", ".join(f"{r.wall_s:.2f}" for r in loaded_runs)
    )


if __name__ == "__main__":
    sys.exit(main())
