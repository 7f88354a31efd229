"""A study at scale: what a synthetic study of N queries costs the server, beside the same pools
judged as independent jobs, and how its memory grows with N and with its live tournaments.

    python -m tierank.bench.study_scale                            # 500 queries, 8 live
    python -m tierank.bench.study_scale --compare-jobs             # and the same pools as jobs
    python -m tierank.bench.study_scale --queries 500,2000 --max-live 8,64   # memory sweep
    python -m tierank.bench.study_scale --db postgres --compare-jobs

The study: N queries x 3 systems, each system's run 30-40 documents per query (documents drawn
from 80 per query, ranked by a hidden grade 0-3 through per-system noise whose size varies by
query, so that the systems agree on some queries and not on others), pooled at depth 20 (pools
of about 40 documents, 22-52), the `oracle` judge with zero latency reading each passage's
grade (metadata "score") through noise 0.5, k = 10, top-10, the default measures and report.
It is made as a user makes one, through the Python client: CreateStudy, AddStudyInputs in the
1 MiB chunks of tierank.client._study.chunks (only pooled passages), StartStudy, WatchStudy
to its end, GetStudyReport. The server runs in its own process (SQLite in a fresh file, or
PostgreSQL in a fresh schema of --postgres); its CPU is read from /proc/PID/stat, its memory
(VmRSS) sampled every 50 ms.

Printed per study: wall time (upload and start; judging; all), judge calls (verdicts), the
server's CPU by phase and per verdict (upload and start: receiving the chunks and pooling;
judging: from StartStudy's answer until every query has ended; report: until the final state,
which the driver sets once the report is built), and its RSS: before the upload, the peak of
the upload and start, the peak while judging, and VmHWM (the process's peak). With PostgreSQL,
the CPU of the server's own database backends too (found by an application_name of the run's).

--compare-jobs then judges the same pools (each study job's spec, read back with GetJob in
the FULL view) as independent jobs on a fresh server of the same kind: one CreateJob per
query, at most --max-live at once, each waited for by --jobs-wait: `watch` (WatchJob to its
end: every event streamed to the client) and/or `poll` (GetJob every PASS_INTERVAL_S, as the
study's driver looks at its jobs). Judge calls come from each job's final stats; the same
specs and seeds give the same calls as the study's (printed, a check). The ratio of the
study's CPU per verdict to the jobs' is the issue's figure (target: within 1.2x).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import secrets
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import grpc
import psycopg
from psycopg import sql

from tierank.bench.service_bench import WORDS, cpu_seconds
from tierank.client import Client, LocalServer
from tierank.client._study import StudyFiles, chunks, pooled_documents
from tierank.evaluation import Run
from tierank.resources import FINAL_JOB_STATES, is_terminal_event
from tierank.server.studies.driver import PASS_INTERVAL_S
from tierank.v1 import eval_pb2, rank_pb2, rank_pb2_grpc, study_pb2

SYSTEMS = ("alpha", "beta", "gamma")
DEPTH = 20
TOP_K = 10
BATCH_SIZE = 10
DOCUMENTS_PER_QUERY = 80
RUN_LENGTHS = (30, 40)
# Hidden grades 0..3 of a query's documents: most are not relevant, as in TREC pools.
GRADE_WEIGHTS = (55, 25, 12, 8)
# How much systems disagree, drawn per query: small makes pools of ~25, large of ~50.
SYSTEM_NOISE = (0.3, 6.0)
PASSAGE_WORDS = 40
DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"
SAMPLE_INTERVAL_S = 0.05
SERVER_ARGS = ("--log-level", "warning")
MIB = 2**20


def synthetic_study(queries: int, seed: int) -> StudyFiles:
    """N topics, three systems' runs and the pooled documents' passages, graded in metadata."""
    rng = random.Random(seed)
    topics: dict[str, str] = {}
    runs: dict[str, Run] = {system: {} for system in SYSTEMS}
    grades: dict[str, int] = {}
    for q in range(queries):
        qid = f"q{q}"
        topics[qid] = f"query {q} " + " ".join(rng.choice(WORDS) for _ in range(6))
        documents = [f"{qid}-d{j}" for j in range(DOCUMENTS_PER_QUERY)]
        for doc in documents:
            grades[doc] = rng.choices(range(4), GRADE_WEIGHTS)[0]
        # A shared component, so that the systems agree more than chance.
        retrievability = {doc: grades[doc] + rng.gauss(0.0, 1.0) for doc in documents}
        disagreement = rng.uniform(*SYSTEM_NOISE)
        for system in SYSTEMS:
            scored = {doc: retrievability[doc] + rng.gauss(0.0, disagreement) for doc in documents}
            ranked = sorted(documents, key=scored.__getitem__, reverse=True)
            runs[system][qid] = {doc: scored[doc] for doc in ranked[: rng.randint(*RUN_LENGTHS)]}
    passages = {
        doc: (
            " ".join(rng.choice(WORDS) for _ in range(PASSAGE_WORDS)),
            {"score": str(grades[doc])},
        )
        for doc in sorted(pooled_documents(runs, DEPTH))
    }
    return StudyFiles(topics=topics, runs=runs, passages=passages)


# A study of tournaments alone: its labels are rank bands, as the same pools' jobs have none
# (pointwise labels would add probes no job makes; bench/README.md section 16 measures them).
TOURNAMENT_LABELS = eval_pb2.TierMapping(rank_bands=eval_pb2.RankBands())


def ranking_spec(noise: float, seed: int, latency_ms: float = 0.0) -> rank_pb2.JobSpec:
    """A study's ranking: the `oracle` judge (with a simulated latency per call), k, top-K."""
    options = {"noise": str(noise), "latency_ms": str(latency_ms)}
    judge = rank_pb2.JudgeSpec(
        provider="oracle", parameters=rank_pb2.JudgeParameters(options=options)
    )
    return rank_pb2.JobSpec(judges=[judge], batch_size=BATCH_SIZE, top_k=TOP_K, seed=seed)


# -- the server process: memory and CPU -------------------------------------------------------


def _status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1])
    raise RuntimeError(f"no {key} in /proc/{pid}/status")


def rss_bytes(pid: int) -> int:
    return _status_kib(pid, "VmRSS:") * 1024


def peak_rss_bytes(pid: int) -> int:
    """The process's resident high-water mark since it started (VmHWM)."""
    return _status_kib(pid, "VmHWM:") * 1024


class MemorySampler:
    """VmRSS of a process every SAMPLE_INTERVAL_S on a thread, for peaks over spans of time."""

    def __init__(self, pid: int) -> None:
        self._pid = pid
        self._samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            with suppress(FileNotFoundError, ProcessLookupError):
                self._samples.append((time.perf_counter(), rss_bytes(self._pid)))
            self._stop.wait(SAMPLE_INTERVAL_S)

    def peak(self, start: float, end: float) -> int:
        return max((rss for t, rss in self._samples if start <= t <= end), default=0)

    def first(self, start: float) -> int:
        """The first sample from `start` on."""
        return next((rss for t, rss in self._samples if t >= start), 0)


@dataclass
class ServerUnderTest:
    server: LocalServer
    # CPU seconds of the server's PostgreSQL backends (alive now); 0 on SQLite.
    backend_cpu: Callable[[], float]

    @property
    def pid(self) -> int:
        assert self.server.pid is not None
        return self.server.pid

    def cpu(self) -> float:
        return cpu_seconds(self.pid)


@contextmanager
def server_under_test(db: str, postgres: str) -> Iterator[ServerUnderTest]:
    """A fresh server process: SQLite in a new file, or PostgreSQL in a new schema (dropped
    after), its connections named so that their backends can be found."""
    if db == "sqlite":
        with (
            tempfile.TemporaryDirectory() as tmp,
            LocalServer(db=Path(tmp) / "study.db", extra_args=SERVER_ARGS) as server,
        ):
            yield ServerUnderTest(server, lambda: 0.0)
        return
    tag = f"studybench_{secrets.token_hex(4)}"
    with psycopg.connect(postgres, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(tag)))
        separator = "&" if "?" in postgres else "?"
        url = f"{postgres}{separator}application_name={tag}&options={quote(f'-csearch_path={tag}')}"

        def backend_cpu() -> float:
            rows = admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (tag,)
            ).fetchall()
            total = 0.0
            for (pid,) in rows:
                with suppress(FileNotFoundError, ProcessLookupError):  # gone since the query
                    total += cpu_seconds(pid)
            return total

        try:
            with LocalServer(db=url, extra_args=SERVER_ARGS) as server:
                yield ServerUnderTest(server, backend_cpu)
        finally:
            admin.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(tag)))


# -- the study ----------------------------------------------------------------------------------


@dataclass
class StudyResult:
    queries: int
    max_live: int
    pooled_documents: int
    chunks: int
    verdicts: int
    settled: int
    upload_s: float
    judging_s: float
    wall_s: float
    upload_cpu_s: float
    judging_cpu_s: float
    # None when no watch message showed every query ended before the final state (a report
    # built within one watch poll).
    report_cpu_s: float | None
    total_cpu_s: float
    backend_cpu_s: float
    rss_idle: int
    rss_upload_peak: int
    rss_judging_start: int
    rss_judging_peak: int
    # None as report_cpu_s is.
    rss_report_peak: int | None
    rss_hwm: int
    ranking: list[str] = field(default_factory=list)
    job_names: list[str] = field(default_factory=list)

    @property
    def cpu_ms_per_verdict(self) -> float:
        return self.total_cpu_s * 1000 / self.verdicts

    @property
    def judging_cpu_ms_per_verdict(self) -> float:
        return self.judging_cpu_s * 1000 / self.verdicts


def run_study(target: ServerUnderTest, files: StudyFiles, spec: study_pb2.StudySpec) -> StudyResult:
    pid = target.pid
    request_id = f"scale-{secrets.token_hex(4)}"
    # CPU and time when a watch message first shows every query ended, the study running.
    all_ended: tuple[float, float] | None = None
    with MemorySampler(pid) as memory, Client(target.server.address) as client:
        rss_idle = rss_bytes(pid)
        backend_before = target.backend_cpu()
        cpu_before = target.cpu()
        started = time.perf_counter()
        study = client.create_study(spec, request_id=request_id)
        sent = list(chunks(files, request_id))
        client.add_study_inputs(study.name, sent)
        client.start_study(study.name)
        judging_from = time.perf_counter()
        cpu_started = target.cpu()
        last = study
        for last in client.watch_study(study.name):
            progress = last.progress
            ended = progress.settled + progress.provisional + progress.failed
            running = last.state == study_pb2.STUDY_STATE_RUNNING
            if all_ended is None and running and ended == progress.queries:
                all_ended = (target.cpu(), time.perf_counter())
        finished = time.perf_counter()
        cpu_after = target.cpu()
        backend_after = target.backend_cpu()
        rss_hwm = peak_rss_bytes(pid)
        if last.state != study_pb2.STUDY_STATE_SUCCEEDED:
            raise SystemExit(f"the study ended {study_pb2.StudyState.Name(last.state)}")
        report = client.get_study_report(study.name)
        job_names = [q.job for q in client.list_study_queries(study.name)]
    progress = last.progress
    judging_cpu_end, judging_end = all_ended or (cpu_after, finished)
    return StudyResult(
        queries=progress.queries,
        max_live=spec.max_live_queries,
        pooled_documents=progress.pooled_documents,
        chunks=len(sent),
        verdicts=progress.judge_calls,
        settled=progress.settled,
        upload_s=judging_from - started,
        judging_s=finished - judging_from,
        wall_s=finished - started,
        upload_cpu_s=cpu_started - cpu_before,
        judging_cpu_s=judging_cpu_end - cpu_started,
        report_cpu_s=None if all_ended is None else cpu_after - judging_cpu_end,
        total_cpu_s=cpu_after - cpu_before,
        backend_cpu_s=backend_after - backend_before,
        rss_idle=rss_idle,
        rss_upload_peak=memory.peak(started, judging_from),
        rss_judging_start=memory.first(judging_from),
        rss_judging_peak=memory.peak(judging_from, judging_end),
        rss_report_peak=None if all_ended is None else memory.peak(judging_end, finished),
        rss_hwm=rss_hwm,
        ranking=list(report.ranking),
        job_names=job_names,
    )


def study_job_specs(address: str, job_names: list[str]) -> list[rank_pb2.JobSpec]:
    """Each study query's job spec as the study made it (pool, ranking parameters, seed)."""
    with Client(address) as client:
        return [client.get_job(name, full=True).spec for name in job_names]


# -- the same pools as independent jobs -------------------------------------------------------


@dataclass
class JobsResult:
    wait: str
    jobs: int
    verdicts: int
    wall_s: float
    cpu_s: float
    backend_cpu_s: float
    rss_idle: int
    rss_peak: int

    @property
    def cpu_ms_per_verdict(self) -> float:
        return self.cpu_s * 1000 / self.verdicts


async def _judge_as_jobs(
    address: str, specs: list[rank_pb2.JobSpec], max_live: int, wait: str
) -> int:
    """Every spec as a job, at most `max_live` at once; the judge calls of them all."""
    slots = asyncio.Semaphore(max_live)
    calls = 0
    async with grpc.aio.insecure_channel(address) as channel:
        stub = rank_pb2_grpc.RankServiceStub(channel)

        async def one(spec: rank_pb2.JobSpec) -> None:
            nonlocal calls
            async with slots:
                job = await stub.CreateJob(rank_pb2.CreateJobRequest(spec=spec))
                if wait == "watch":
                    request = rank_pb2.WatchJobRequest(name=job.name)
                    async for event in stub.WatchJob(request):
                        if is_terminal_event(event):
                            break
                    job = await stub.GetJob(rank_pb2.GetJobRequest(name=job.name))
                else:
                    while job.state not in FINAL_JOB_STATES:
                        await asyncio.sleep(PASS_INTERVAL_S)
                        job = await stub.GetJob(rank_pb2.GetJobRequest(name=job.name))
                if job.state != rank_pb2.JOB_STATE_SUCCEEDED:
                    raise SystemExit(f"{job.name} ended {rank_pb2.JobState.Name(job.state)}")
                calls += job.stats.judge_calls

        await asyncio.gather(*(one(spec) for spec in specs))
    return calls


def run_jobs(
    target: ServerUnderTest, specs: list[rank_pb2.JobSpec], max_live: int, wait: str
) -> JobsResult:
    pid = target.pid
    with MemorySampler(pid) as memory:
        rss_idle = rss_bytes(pid)
        backend_before = target.backend_cpu()
        cpu_before = target.cpu()
        started = time.perf_counter()
        verdicts = asyncio.run(_judge_as_jobs(target.server.address, specs, max_live, wait))
        finished = time.perf_counter()
        cpu_s = target.cpu() - cpu_before
        backend_cpu_s = target.backend_cpu() - backend_before
    return JobsResult(
        wait=wait,
        jobs=len(specs),
        verdicts=verdicts,
        wall_s=finished - started,
        cpu_s=cpu_s,
        backend_cpu_s=backend_cpu_s,
        rss_idle=rss_idle,
        rss_peak=memory.peak(started, finished),
    )


# -- printing -----------------------------------------------------------------------------------


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / MIB:.1f}"


def print_study(result: StudyResult, postgres: bool) -> None:
    r = result
    report = "-" if r.report_cpu_s is None else f"{r.report_cpu_s:.2f}"
    print(
        f"study: {r.queries} queries x {len(SYSTEMS)} systems, depth {DEPTH}, "
        f"{r.pooled_documents} pooled documents ({r.pooled_documents / r.queries:.1f} a query), "
        f"max_live_queries {r.max_live}, {r.chunks} chunks; {r.settled} settled; "
        f"ranking {' > '.join(r.ranking)}"
    )
    print(
        f"  wall {r.wall_s:.1f} s (upload and start {r.upload_s:.1f} s, judging and report "
        f"{r.judging_s:.1f} s); {r.verdicts} judge calls, {r.verdicts / r.judging_s:.0f}/s"
    )
    print(
        f"  server CPU {r.total_cpu_s:.2f} s (upload and start {r.upload_cpu_s:.2f}, judging "
        f"{r.judging_cpu_s:.2f}, report {report}); per verdict {r.cpu_ms_per_verdict:.3f} ms, "
        f"judging alone {r.judging_cpu_ms_per_verdict:.3f} ms"
    )
    if postgres:
        print(
            f"  PostgreSQL backends' CPU {r.backend_cpu_s:.2f} s, "
            f"{r.backend_cpu_s * 1000 / r.verdicts:.3f} ms per verdict"
        )
    print(
        f"  server RSS MiB: before upload {_mib(r.rss_idle)}, peak upload and start "
        f"{_mib(r.rss_upload_peak)}, judging {_mib(r.rss_judging_start)} at its start -> peak "
        f"{_mib(r.rss_judging_peak)}, peak report {_mib(r.rss_report_peak)}, "
        f"VmHWM {_mib(r.rss_hwm)}"
    )


def print_jobs(study: StudyResult, jobs: JobsResult, postgres: bool) -> None:
    j = jobs
    print(
        f"  as {j.jobs} jobs ({j.wait}), at most {study.max_live} at once: wall {j.wall_s:.1f} s, "
        f"{j.verdicts} judge calls (study: {study.verdicts}), server CPU {j.cpu_s:.2f} s, "
        f"{j.cpu_ms_per_verdict:.3f} ms per verdict; RSS MiB {_mib(j.rss_idle)} -> peak "
        f"{_mib(j.rss_peak)}"
    )
    if postgres:
        print(
            f"    PostgreSQL backends' CPU {j.backend_cpu_s:.2f} s, "
            f"{j.backend_cpu_s * 1000 / j.verdicts:.3f} ms per verdict"
        )
    whole = study.cpu_ms_per_verdict / j.cpu_ms_per_verdict
    judging = study.judging_cpu_ms_per_verdict / j.cpu_ms_per_verdict
    print(
        f"    study/jobs ({j.wait}) server CPU per verdict {whole:.2f} (judging alone "
        f"{judging:.2f}); wall {study.wall_s / j.wall_s:.2f}"
    )


def print_summary(
    results: list[StudyResult], jobs: dict[tuple[int, int, str], list[JobsResult]]
) -> None:
    """One line per study; then, per configuration and wait, the median ratio over rounds."""
    print()
    print(
        f"{'queries':>8} {'live':>5} {'verdicts':>9} {'wall s':>7} {'CPU s':>7} "
        f"{'ms/verdict':>10} | RSS MiB: {'idle':>6} {'upload':>7} {'judge 0':>8} "
        f"{'judge pk':>9} {'report':>7} {'VmHWM':>7}"
    )
    for r in results:
        print(
            f"{r.queries:>8} {r.max_live:>5} {r.verdicts:>9} {r.wall_s:>7.1f} "
            f"{r.total_cpu_s:>7.2f} {r.cpu_ms_per_verdict:>10.3f} |          "
            f"{_mib(r.rss_idle):>6} {_mib(r.rss_upload_peak):>7} "
            f"{_mib(r.rss_judging_start):>8} {_mib(r.rss_judging_peak):>9} "
            f"{_mib(r.rss_report_peak):>7} {_mib(r.rss_hwm):>7}"
        )
    for (queries, max_live, wait), rounds in jobs.items():
        studies = [r for r in results if (r.queries, r.max_live) == (queries, max_live)]
        ratios = [
            s.cpu_ms_per_verdict / j.cpu_ms_per_verdict
            for s, j in zip(studies, rounds, strict=True)
        ]
        judging = [
            s.judging_cpu_ms_per_verdict / j.cpu_ms_per_verdict
            for s, j in zip(studies, rounds, strict=True)
        ]
        print(
            f"{queries} queries, {max_live} live, jobs {wait}: study/jobs server CPU per verdict "
            f"{', '.join(f'{x:.2f}' for x in ratios)} (median {statistics.median(ratios):.2f}; "
            f"judging alone median {statistics.median(judging):.2f})"
        )


def _counts(text: str) -> list[int]:
    return [int(part) for part in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--queries", type=_counts, default=[500], help="queries, or a list: 500,2000 (default 500)"
    )
    parser.add_argument(
        "--max-live",
        type=_counts,
        default=[8],
        help="max_live_queries, or a list: 8,64 (default 8); each with each --queries",
    )
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument(
        "--postgres",
        default=DEFAULT_POSTGRES,
        help=f"with --db postgres: the database (default {DEFAULT_POSTGRES})",
    )
    parser.add_argument(
        "--compare-jobs",
        action="store_true",
        help="judge the same pools as independent jobs too, each time on a fresh server",
    )
    parser.add_argument(
        "--jobs-wait",
        default="watch,poll",
        help="how the jobs are waited for: watch, poll or both (default watch,poll)",
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="each configuration this many times, alternating"
    )
    parser.add_argument("--noise", type=float, default=0.5, help="the oracle's noise")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    waits = [w for w in args.jobs_wait.split(",") if w] if args.compare_jobs else []
    if not set(waits) <= {"watch", "poll"}:
        parser.error("--jobs-wait takes watch, poll or both")
    postgres = args.db == "postgres"
    studies = {queries: synthetic_study(queries, args.seed) for queries in args.queries}
    results: list[StudyResult] = []
    jobs: dict[tuple[int, int, str], list[JobsResult]] = {}
    for _ in range(args.rounds):
        for queries, files in studies.items():
            for max_live in args.max_live:
                spec = study_pb2.StudySpec(
                    display_name=f"scale {queries} x {max_live}",
                    depth=DEPTH,
                    ranking=ranking_spec(args.noise, args.seed),
                    max_live_queries=max_live,
                    labels=TOURNAMENT_LABELS,
                )
                with server_under_test(args.db, args.postgres) as target:
                    result = run_study(target, files, spec)
                    specs = study_job_specs(target.server.address, result.job_names)
                results.append(result)
                print_study(result, postgres)
                for wait in waits:
                    with server_under_test(args.db, args.postgres) as target:
                        judged = run_jobs(target, specs, max_live, wait)
                    jobs.setdefault((queries, max_live, wait), []).append(judged)
                    print_jobs(result, judged, postgres)
                sys.stdout.flush()
    if len(results) > 1:
        print_summary(results, jobs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
