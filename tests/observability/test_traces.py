"""Traces through a real OTLP/gRPC endpoint on loopback (tests/observability/collector.py), from
real server processes driving real provider SDKs against the fake LLM servers: the RPC span in
the caller's trace, a job's runs, waves and GenAI judge-call spans in it, no text or key in any
span unless content capture is on, log lines and `tierank jobs` naming the trace, latency
buckets linking to it, and one trace for a job that survives a kill -9 of its replica."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import urllib.request
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "client"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cli_process import tierank, unused_address
from collector import ReceivedSpan, TraceCollector, named
from graded_fakes import (
    FAKE_MODEL_PRICES,
    MODELS,
    PROVIDER_ENV,
    FakeLLMThread,
    GradedResponder,
    graded_pool,
    judges_config,
)

from tierank.client import LocalServer, candidate, job_spec, judge
from tierank.v1 import rank_pb2, rank_pb2_grpc

MODEL = MODELS["openai"]
API_KEY = "sk-tierank-test-9f3c2e71d4a8b6"
QUERY = "which passage has the highest grade"
# The caller's own trace: the job must join it.
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
CREATE_JOB = "tierank.v1.RankService/CreateJob"
# Spans leave a server every 50 ms, so that a replica killed mid-job has sent what had ended.
FAST_EXPORT = {"OTEL_BSP_SCHEDULE_DELAY": "50"}


def _config(tmp_path: Path, fake) -> Path:
    config = judges_config(fake, prices=FAKE_MODEL_PRICES)
    config["providers"]["openai"]["api_key"] = API_KEY
    path = tmp_path / "judges.json"
    path.write_text(json.dumps(config))
    return path


def _spec(n: int, latency_batch: int = 4) -> rank_pb2.JobSpec:
    return job_spec(
        QUERY,
        [candidate(c.id, c.text) for c in graded_pool(n)],
        judges=[judge(f"openai:{MODEL}")],
        rubric="a passage is better the higher its grade",
        batch_size=latency_batch,
    )


def _create(address: str, spec: rank_pb2.JobSpec) -> str:
    with grpc.insecure_channel(address) as channel:
        stub = rank_pb2_grpc.RankServiceStub(channel)
        job = stub.CreateJob(
            rank_pb2.CreateJobRequest(spec=spec), metadata=[("traceparent", TRACEPARENT)]
        )
    return job.name


def _events(address: str, name: str) -> list[rank_pb2.JobEvent]:
    with grpc.insecure_channel(address) as channel:
        stub = rank_pb2_grpc.RankServiceStub(channel)
        return list(stub.WatchJob(rank_pb2.WatchJobRequest(name=name), timeout=90))


def _by_id(spans: list[ReceivedSpan]) -> dict[str, ReceivedSpan]:
    return {span.span_id: span for span in spans}


def _ancestors(span: ReceivedSpan, spans: dict[str, ReceivedSpan]) -> list[str]:
    """The names of `span`'s ancestors that the collector has, nearest first."""
    names = []
    while span.parent_id in spans:
        span = spans[span.parent_id]
        names.append(span.name)
    return names


def _job_spans(spans: list[ReceivedSpan], job_id: str, name: str) -> list[ReceivedSpan]:
    return [s for s in named(spans, name) if s.attributes.get("tierank.job.id") == job_id]


def test_a_jobs_rpc_runs_waves_and_judge_calls_are_one_trace_without_any_text(tmp_path: Path):
    metrics_address = unused_address()
    with TraceCollector() as collector, FakeLLMThread() as fake:
        fake.respond_with("openai", GradedResponder(name="openai"))
        server = LocalServer(
            db=tmp_path / "tierank.db",
            extra_args=(
                "--judges-config",
                str(_config(tmp_path, fake)),
                "--otlp-endpoint",
                collector.endpoint,
                "--metrics-listen",
                metrics_address,
            ),
            env={**dict.fromkeys(PROVIDER_ENV), **FAST_EXPORT},
        )
        with server:
            spec = _spec(12)
            name = _create(server.address, spec)
            events = _events(server.address, name)
            job_id = name.rsplit("/", 1)[1]
            verdicts = {e.verdict.call_id: e.verdict for e in events if e.HasField("verdict")}
            spans = collector.wait_for(
                lambda spans: (
                    len(_job_spans(spans, job_id, f"chat {MODEL}")) >= len(verdicts)
                    and any(_job_spans(spans, job_id, "tierank.job.run"))
                )
            )
            listed = tierank("jobs", "--server", server.address)
            scraped = _scrape(metrics_address)
            log = server.log_tail(400)

    assert events[-1].HasField("completed") and verdicts
    # One SERVER span for the call, a child of the caller's span in the caller's trace.
    (create,) = named(spans, CREATE_JOB)
    assert (create.trace_id, create.parent_id) == (CALLER_TRACE, CALLER_SPAN)
    assert create.span.kind == create.span.SPAN_KIND_SERVER
    assert create.attributes["rpc.grpc.status_code"] == 0
    # The job's run under it, the waves under the run, a GenAI span per judge call in a wave.
    by_id = _by_id(spans)
    (run,) = _job_spans(spans, job_id, "tierank.job.run")
    assert run.parent_id == create.span_id
    chats = _job_spans(spans, job_id, f"chat {MODEL}")
    assert {chat.attributes["tierank.call.id"] for chat in chats} == set(verdicts)
    for chat in chats:
        assert chat.trace_id == CALLER_TRACE
        assert _ancestors(chat, by_id)[:3] == ["tierank.job.wave", "tierank.job.run", CREATE_JOB]
        attributes = chat.attributes
        verdict = verdicts[attributes["tierank.call.id"]]
        assert chat.span.kind == chat.span.SPAN_KIND_CLIENT
        assert attributes["gen_ai.system"] == attributes["gen_ai.provider.name"] == "openai"
        assert attributes["gen_ai.request.model"] == MODEL
        assert attributes["gen_ai.operation.name"] == "chat"
        assert attributes["gen_ai.usage.input_tokens"] == verdict.usage.input_tokens > 0
        assert attributes["gen_ai.usage.output_tokens"] == verdict.usage.output_tokens > 0
        # The fake provider serves a prefix of every prompt from its cache (graded_fakes).
        cache_read = attributes["gen_ai.usage.cache_read.input_tokens"]
        assert cache_read == verdict.usage.cached_input_tokens > 0
        assert attributes["gen_ai.usage.cache_creation.input_tokens"] == 0
        assert attributes["gen_ai.response.id"] == "chatcmpl-fake"
        assert attributes["gen_ai.response.finish_reasons"] == ["stop"]
        assert attributes["tierank.tenant"] == "default"
        assert attributes["tierank.judge.breaker_state"] == "closed"
        assert attributes["tierank.judge.retries"] == 0
        assert "gen_ai.input.messages" not in attributes
        assert "gen_ai.output.messages" not in attributes
    waves = _job_spans(spans, job_id, "tierank.job.wave")
    assert sum(w.attributes["tierank.wave.calls"] for w in waves) == len(verdicts)
    # Content capture is off: no query, passage, answer or key anywhere in what was exported.
    exported = b"".join(collector.raw)
    for secret in (API_KEY, QUERY, *(c.text for c in spec.candidates)):
        assert secret.encode() not in exported, secret
    assert b"[1]" not in exported and b"ranking" not in exported  # answers: "[2] > [1]", JSON
    # `tierank jobs` names the trace; every line the job logged carries it.
    assert listed.returncode == 0, listed.stderr
    assert CALLER_TRACE in listed.stdout and "trace" in listed.stdout.splitlines()[0]
    job_lines = [json.loads(line) for line in log.splitlines() if job_id in line]
    assert any(line["event"] == "job finished" for line in job_lines)
    assert all(line.get("trace_id") == CALLER_TRACE for line in job_lines), job_lines
    # A latency bucket links to the trace (OpenMetrics exemplars), labelled by model.
    exemplars = [
        line
        for line in scraped.splitlines()
        if line.startswith("tierank_judge_call_seconds_bucket{")
        and f'model="{MODEL}"' in line
        and " # " in line
    ]
    assert exemplars and all(f'trace_id="{CALLER_TRACE}"' in line for line in exemplars)
    cached = sum(v.usage.cached_input_tokens for v in verdicts.values())
    assert (
        f'tierank_judge_cached_input_tokens_total{{model="{MODEL}",provider="openai",'
        f'tenant="default"}} {float(cached)}'
    ) in scraped.splitlines()


def _scrape(address: str) -> str:
    request = urllib.request.Request(
        f"http://{address}/metrics", headers={"Accept": "application/openmetrics-text"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.read().decode()


def test_content_capture_puts_the_prompt_and_the_answer_in_the_judge_call_span(tmp_path: Path):
    with TraceCollector() as collector, FakeLLMThread() as fake:
        fake.respond_with("openai", GradedResponder(name="openai"))
        config = _config(tmp_path, fake)
        server = LocalServer(
            db=tmp_path / "tierank.db",
            extra_args=("--judges-config", str(config), "--trace-content", "on"),
            env={
                **dict.fromkeys(PROVIDER_ENV),
                **FAST_EXPORT,
                # The standard variable turns tracing on like --otlp-endpoint.
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": collector.endpoint,
            },
        )
        with server:
            spec = _spec(4)
            name = _create(server.address, spec)
            _events(server.address, name)
            spans = collector.wait_for(lambda spans: any(named(spans, f"chat {MODEL}")))
    chat = next(named(spans, f"chat {MODEL}"))
    sent = json.loads(chat.attributes["gen_ai.input.messages"])
    answered = json.loads(chat.attributes["gen_ai.output.messages"])
    assert sent[0]["role"] == "user" and QUERY in sent[0]["parts"][0]["content"]
    assert all(c.text[:40] in sent[0]["parts"][0]["content"] for c in spec.candidates)
    assert answered[0]["role"] == "assistant" and answered[0]["parts"][0]["content"]
    assert API_KEY.encode() not in b"".join(collector.raw)  # a key never, even then


def test_a_job_taken_over_after_kill_9_goes_on_in_the_same_trace(schema_url: str, tmp_path: Path):
    with TraceCollector() as collector, FakeLLMThread() as fake:
        fake.respond_with("openai", GradedResponder(latency_s=0.25, name="openai"))
        extra = (
            "--judges-config",
            str(_config(tmp_path, fake)),
            "--otlp-endpoint",
            collector.endpoint,
            "--lease-seconds",
            "2",
        )
        env = {**dict.fromkeys(PROVIDER_ENV), **FAST_EXPORT}
        servers = [LocalServer(db=schema_url, extra_args=extra, env=env) for _ in range(2)]
        try:
            for server in servers:
                server.start()
            a, b = servers
            name = _create(a.address, _spec(24))
            job_id = name.rsplit("/", 1)[1]
            collector.wait_for(lambda spans: len(_job_spans(spans, job_id, f"chat {MODEL}")) >= 2)
            os.kill(a.pid, signal.SIGKILL)
            killed = time.time_ns()
            events = _events(b.address, name)
            spans = collector.wait_for(
                lambda spans: any(_job_spans(spans, job_id, "tierank.job.run"))
            )
        finally:
            for server in servers:
                server.stop()
    assert events[-1].HasField("completed")
    (create,) = named(spans, CREATE_JOB)
    killed_replica = create.resource["service.instance.id"]
    # The run that finished the job is the survivor's, a child of the call that made the job.
    (run,) = _job_spans(spans, job_id, "tierank.job.run")
    assert run.resource["service.instance.id"] != killed_replica
    assert (run.trace_id, run.parent_id) == (CALLER_TRACE, create.span_id)
    chats = _job_spans(spans, job_id, f"chat {MODEL}")
    replicas = {chat.resource["service.instance.id"] for chat in chats}
    assert killed_replica in replicas and len(replicas) == 2
    assert any(chat.span.start_time_unix_nano > killed for chat in chats)
    assert {chat.trace_id for chat in chats} == {CALLER_TRACE}
