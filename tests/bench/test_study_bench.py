"""The study benchmarks at a small size: the synthetic study's shape, the study and the same
pools as jobs making the same judge calls, and the fairness run's output. Nothing is timed."""

from __future__ import annotations

import re

import pytest

from tierank.bench import study_fairness
from tierank.bench.study_scale import (
    DEPTH,
    RUN_LENGTHS,
    SYSTEMS,
    TOURNAMENT_LABELS,
    ranking_spec,
    run_jobs,
    run_study,
    server_under_test,
    study_job_specs,
    synthetic_study,
)
from tierank.client._study import pooled_documents
from tierank.evaluation import pool_runs
from tierank.v1 import study_pb2


def test_synthetic_study_pools_three_runs_with_graded_passages():
    files = synthetic_study(40, seed=3)
    assert set(files.runs) == set(SYSTEMS)
    for run in files.runs.values():
        assert set(run) == set(files.topics)
        assert all(RUN_LENGTHS[0] <= len(docs) <= RUN_LENGTHS[1] for docs in run.values())
    sizes = [len(pool) for pool in pool_runs(files.runs, DEPTH).values()]
    assert all(DEPTH <= size <= len(SYSTEMS) * DEPTH for size in sizes)
    # Systems that agreed on every query would pool DEPTH documents each time.
    assert max(sizes) > DEPTH + 5
    assert set(files.passages) == pooled_documents(files.runs, DEPTH)
    assert {metadata["score"] for _, metadata in files.passages.values()} <= {"0", "1", "2", "3"}
    assert synthetic_study(40, seed=3) == files


@pytest.mark.parametrize("wait", ["watch", "poll"])
def test_the_same_pools_as_jobs_make_the_studys_judge_calls(wait):
    files = synthetic_study(12, seed=1)
    spec = study_pb2.StudySpec(
        depth=DEPTH,
        ranking=ranking_spec(0.5, seed=1),
        max_live_queries=4,
        labels=TOURNAMENT_LABELS,
    )
    with server_under_test("sqlite", "") as target:
        study = run_study(target, files, spec)
        specs = study_job_specs(target.server.address, study.job_names)
    assert study.queries == study.settled == 12
    assert study.pooled_documents == len(files.passages)
    assert study.verdicts > 0
    assert study.rss_judging_peak >= study.rss_judging_start > 0
    pools = pool_runs(files.runs, DEPTH)
    assert [len(s.candidates) for s in specs] == [len(pools[qid]) for qid in files.topics]
    with server_under_test("sqlite", "") as target:
        jobs = run_jobs(target, specs, 4, wait)
    # The same pools, parameters and seeds: the tournaments ask the same calls.
    assert (jobs.jobs, jobs.verdicts) == (12, study.verdicts)


def test_fairness_run_reports_one_shape_of_tenant_bs_job(capsys):
    study_fairness.main(
        ["--queries", "80", "--rounds", "1", "--jobs-per-phase", "2", "--latency-ms", "20"]
    )
    out = capsys.readouterr().out
    # B's job is the same every time (same spec and seed): one (calls, critical path) shape.
    shapes = re.search(r"of its runs: \[(.*)\]", out)
    assert shapes is not None and re.fullmatch(r"\(\d+, \d+\)", shapes.group(1))
    assert re.search(r"job wall s p50\s+[\d.]+\s+[\d.]+\s+[\d.]+", out)
    called = re.search(r"running in all, (\d+) judge calls", out)
    assert called is not None and int(called.group(1)) > 0
