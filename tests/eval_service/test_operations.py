"""QualifyJudge and FillQrels as operations, through a real server: StartFillQrels returns at
once, the progress can be got and watched, a cancel stops the paid calls (counted at the fake
provider), a request_id makes the start idempotent, and an operation whose server stopped ends
as ABORTED instead of staying RUNNING."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from asyncio.subprocess import PIPE
from pathlib import Path

import anyio
import grpc
import pytest
from fakes import Answer, FakeLLMServer, Hang
from google.rpc import code_pb2
from test_qualify import labelled_files  # also puts tests/client on the path
from test_qualify import request as qualify_request

from tierank.client import AsyncClient, Client, LocalServer, operation_result
from tierank.server.app import background_server
from tierank.server.settings import ServerSettings
from tierank.v1 import eval_pb2, eval_pb2_grpc, rank_pb2

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "client"))

from cli_process import REPO_ROOT, TIERANK, cli_environment

HOLES = 5
LLM_JUDGE = rank_pb2.JudgeSpec(provider="openai", model="gpt-4.1-mini")
ORACLE = rank_pb2.JudgeSpec(
    provider="oracle", parameters=rank_pb2.JudgeParameters(options={"noise": "0"})
)


def fill_request(
    judge: rank_pb2.JudgeSpec = LLM_JUDGE, **fields: object
) -> eval_pb2.FillQrelsRequest:
    """One query whose run's top holds HOLES unjudged documents (and one judged)."""
    docs = [f"d{i}" for i in range(HOLES + 1)]
    run = "".join(f"1 Q0 {d} {r} {100 - r} sys\n" for r, d in enumerate(docs, start=1))
    passages = "".join(
        json.dumps({"id": d, "text": f"text of {d}", "metadata": {"score": str(i % 4)}}) + "\n"
        for i, d in enumerate(docs)
    )
    return eval_pb2.FillQrelsRequest(
        qrels=eval_pb2.TextFile(name="q.txt", content=f"1 0 {docs[0]} 2\n"),
        runs=[eval_pb2.TextFile(name="r.trec", content=run)],
        topics=eval_pb2.TextFile(name="t.tsv", content="1\twhat is it\n"),
        passages=eval_pb2.TextFile(name="p.jsonl", content=passages),
        judge=judge,
        **{"depth": HOLES + 1, "max_in_flight": 1, **fields},
    )


def answer_then_hang(fake: FakeLLMServer, answered: int) -> None:
    """The first `answered` calls get a grade; every later one hangs (as a slow provider)."""
    fake.script("openai", *[Answer(json.dumps({"grade": 2}))] * answered)
    fake.respond_with("openai", lambda _: Hang(60))


async def watch_until(
    stub: eval_pb2_grpc.EvalServiceStub, name: str, done_calls: int
) -> eval_pb2.Operation:
    async for operation in stub.WatchOperation(eval_pb2.WatchOperationRequest(name=name)):
        if operation.progress.done_calls >= done_calls:
            return operation
    raise AssertionError(f"{name} ended before {done_calls} calls")


async def test_progress_can_be_watched_and_a_cancel_stops_the_paid_calls(
    llm_server_address: str, fake_llm: FakeLLMServer
) -> None:
    answer_then_hang(fake_llm, answered=2)
    async with grpc.aio.insecure_channel(llm_server_address) as channel:
        stub = eval_pb2_grpc.EvalServiceStub(channel)
        started = await stub.StartFillQrels(fill_request())
        assert started.name.startswith("operations/")
        assert started.method == "FillQrels"
        assert started.state == rank_pb2.JOB_STATE_RUNNING
        assert started.progress.planned_calls == HOLES

        seen = await watch_until(stub, started.name, done_calls=2)
        assert seen.state == rank_pb2.JOB_STATE_RUNNING
        got = await stub.GetOperation(eval_pb2.GetOperationRequest(name=started.name))
        assert got.progress.done_calls == 2 and got.progress.planned_calls == HOLES
        assert got.progress.usage.input_tokens == 2 * 120  # the fake's tokens per answer
        assert not got.HasField("fill")

        while len(fake_llm.requests("openai")) < 3:  # the third call is in flight, hanging
            await anyio.sleep(0.05)
        cancelled = await stub.CancelOperation(eval_pb2.CancelOperationRequest(name=started.name))
        assert cancelled.state == rank_pb2.JOB_STATE_CANCELLED
        assert cancelled.progress.done_calls == 2
        # Longer than the progress interval and the provider retry delay: nothing else is sent.
        await anyio.sleep(1.5)
        assert len(fake_llm.requests("openai")) == 3
        again = await stub.GetOperation(eval_pb2.GetOperationRequest(name=started.name))
        assert again.state == rank_pb2.JOB_STATE_CANCELLED
        watched = [
            o async for o in stub.WatchOperation(eval_pb2.WatchOperationRequest(name=started.name))
        ]
        assert [o.state for o in watched] == [rank_pb2.JOB_STATE_CANCELLED]


async def test_an_operation_watched_to_the_end_holds_the_unary_report(
    llm_server_address: str, fake_llm: FakeLLMServer
) -> None:
    fake_llm.respond_with("openai", lambda _: Answer(json.dumps({"grade": 3})))
    async with grpc.aio.insecure_channel(llm_server_address) as channel:
        stub = eval_pb2_grpc.EvalServiceStub(channel)
        started = await stub.StartFillQrels(fill_request())
        watched = [
            o async for o in stub.WatchOperation(eval_pb2.WatchOperationRequest(name=started.name))
        ]
        last = watched[-1]
        assert last.state == rank_pb2.JOB_STATE_SUCCEEDED
        assert [o.state for o in watched[:-1]] == [rank_pb2.JOB_STATE_RUNNING] * (len(watched) - 1)
        assert last.progress.done_calls == last.progress.planned_calls == HOLES
        assert last.fill.stats.calls == HOLES
        assert [g.grade for g in last.fill.added] == [3] * HOLES
        # The unary call goes the same way (its grades come from the verdict cache now).
        unary = await stub.FillQrels(fill_request())
        assert unary.qrels == last.fill.qrels
        assert unary.stats.cached_calls == HOLES

        listed = await stub.ListOperations(eval_pb2.ListOperationsRequest(page_size=1))
        assert [o.state for o in listed.operations] == [rank_pb2.JOB_STATE_SUCCEEDED]
        assert not listed.operations[0].HasField("fill")  # results only through Get
        rest = await stub.ListOperations(
            eval_pb2.ListOperationsRequest(page_size=1, page_token=listed.next_page_token)
        )
        assert [o.name for o in rest.operations] == [started.name]
        assert not rest.next_page_token


async def test_qualify_judge_starts_as_an_operation(
    server_address: str, tmp_path: Path, oracle_judge
):
    files = labelled_files(tmp_path)
    async with grpc.aio.insecure_channel(server_address) as channel:
        stub = eval_pb2_grpc.EvalServiceStub(channel)
        started = await stub.StartQualifyJudge(qualify_request(files, oracle_judge(), batch_size=8))
        assert started.method == "QualifyJudge" and started.progress.planned_calls > 0
        *_, last = [
            o async for o in stub.WatchOperation(eval_pb2.WatchOperationRequest(name=started.name))
        ]
        assert last.state == rank_pb2.JOB_STATE_SUCCEEDED
        assert last.qualification.name.startswith("qualifications/")
        assert last.progress.done_calls == started.progress.planned_calls
        assert last.qualification.cost.calls == started.progress.planned_calls
        stored = await stub.ListQualifications(eval_pb2.ListQualificationsRequest())
        assert [q.name for q in stored.qualifications] == [last.qualification.name]


async def test_a_request_id_starts_one_operation(eval_stub: eval_pb2_grpc.EvalServiceStub):
    first = await eval_stub.StartFillQrels(fill_request(ORACLE, request_id="fill-1"))
    retried = await eval_stub.StartFillQrels(fill_request(ORACLE, request_id="fill-1"))
    assert retried.name == first.name
    listed = await eval_stub.ListOperations(eval_pb2.ListOperationsRequest())
    assert [o.name for o in listed.operations] == [first.name]
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await eval_stub.StartFillQrels(fill_request(ORACLE, request_id="fill-1", seed=7))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "request_id" in refused.value.details() and first.name in refused.value.details()


async def test_bad_input_is_refused_at_the_start(eval_stub: eval_pb2_grpc.EvalServiceStub):
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await eval_stub.StartFillQrels(fill_request(ORACLE, depth=-1))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "depth" in refused.value.details()
    listed = await eval_stub.ListOperations(eval_pb2.ListOperationsRequest())
    assert not listed.operations
    for bad in ("operations/", "jobs/abc", "operations/a/b"):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await eval_stub.GetOperation(eval_pb2.GetOperationRequest(name=bad))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await eval_stub.GetOperation(eval_pb2.GetOperationRequest(name="operations/nothing"))
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND


def _llm_settings(tmp_path: Path, fake: FakeLLMServer) -> Path:
    config = {
        "providers": {
            "openai": {
                "api_key": "test-key",
                "base_url": fake.base_url("openai"),
                "timeout_s": 60.0,
                "retry": {"max_attempts": 1},
            }
        }
    }
    path = tmp_path / "judges.json"
    path.write_text(json.dumps(config))
    return path


async def _get(address: str, name: str) -> eval_pb2.Operation:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = eval_pb2_grpc.EvalServiceStub(channel)
        return await stub.GetOperation(eval_pb2.GetOperationRequest(name=name))


async def test_an_operation_ends_as_aborted_when_its_server_stops(
    tmp_path: Path, fake_llm: FakeLLMServer
) -> None:
    answer_then_hang(fake_llm, answered=1)
    settings = ServerSettings(
        listen="127.0.0.1:0",
        db=tmp_path / "ops.db",
        judges_config=_llm_settings(tmp_path, fake_llm),
        shutdown_grace_s=0.5,
    )
    async with (
        background_server(settings) as address,
        grpc.aio.insecure_channel(address) as channel,
    ):
        stub = eval_pb2_grpc.EvalServiceStub(channel)
        started = await stub.StartFillQrels(fill_request())
        await watch_until(stub, started.name, done_calls=1)
    async with background_server(settings) as address:
        ended = await _get(address, started.name)
    assert ended.state == rank_pb2.JOB_STATE_FAILED
    assert ended.error.code == code_pb2.ABORTED
    assert "stopped before it finished" in ended.error.message
    assert ended.progress.done_calls == 1


async def test_an_operation_of_a_killed_server_ends_as_aborted_at_the_next_start(
    tmp_path: Path, fake_llm: FakeLLMServer
) -> None:
    answer_then_hang(fake_llm, answered=1)
    db = tmp_path / "ops.db"
    args = ("--judges-config", str(_llm_settings(tmp_path, fake_llm)), "--log-level", "warning")
    server = LocalServer(db=db, extra_args=args)
    address = await anyio.to_thread.run_sync(server.start)
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            stub = eval_pb2_grpc.EvalServiceStub(channel)
            started = await stub.StartFillQrels(fill_request())
            await watch_until(stub, started.name, done_calls=1)
        assert server.pid is not None
        os.kill(server.pid, signal.SIGKILL)
    finally:
        await anyio.to_thread.run_sync(server.stop)
    restarted = LocalServer(db=db, extra_args=args)
    address = await anyio.to_thread.run_sync(restarted.start)
    try:
        ended = await _get(address, started.name)
    finally:
        await anyio.to_thread.run_sync(restarted.stop)
    assert ended.state == rank_pb2.JOB_STATE_FAILED
    assert ended.error.code == code_pb2.ABORTED


async def _tierank(*args: str) -> tuple[int, str, str]:
    """The command line as a subprocess, without blocking the loop that serves the fakes."""
    process = await asyncio.create_subprocess_exec(
        *TIERANK, *args, cwd=REPO_ROOT, env=cli_environment(), stdout=PIPE, stderr=PIPE
    )
    out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_ctrl_c_in_tierank_fill_leaves_the_operation_and_says_how_to_follow_it(
    llm_server_address: str, fake_llm: FakeLLMServer, tmp_path: Path
) -> None:
    answer_then_hang(fake_llm, answered=1)
    request = fill_request()
    paths = {}
    for field in ("qrels", "topics", "passages"):
        paths[field] = tmp_path / getattr(request, field).name
        paths[field].write_text(getattr(request, field).content)
    paths["run"] = tmp_path / request.runs[0].name
    paths["run"].write_text(request.runs[0].content)
    server = ("--server", llm_server_address)
    process = await asyncio.create_subprocess_exec(
        *TIERANK, "fill",
        "--qrels", str(paths["qrels"]), "--run", str(paths["run"]),
        "--topics", str(paths["topics"]), "--passages", str(paths["passages"]),
        "--depth", str(HOLES + 1), "--max-in-flight", "1", "--judge", "openai:gpt-4.1-mini",
        *server,
        cwd=REPO_ROOT, env=cli_environment(), stdout=PIPE, stderr=PIPE,
    )  # fmt: skip
    assert process.stderr is not None
    first = (await process.stderr.readline()).decode()
    name = first.split()[0]  # progress lines start with the operation's name
    assert name.startswith("operations/") and " FillQrels: 0/" in first
    process.send_signal(signal.SIGINT)
    rest = (await process.stderr.read()).decode()
    assert await process.wait() == 130
    assert f"tierank watch {name} --server {llm_server_address}" in rest
    assert f"tierank cancel {name} --server {llm_server_address}" in rest
    assert (await _get(llm_server_address, name)).state == rank_pb2.JOB_STATE_RUNNING

    code, out, err = await _tierank("cancel", name, *server)
    assert code == 0, err
    assert out.startswith(name) and out.rstrip().endswith("cancelled")
    code, out, err = await _tierank("watch", name, *server)
    assert code == 0, err
    assert out.splitlines() == [line for line in out.splitlines() if "cancelled" in line]


async def test_both_python_clients_start_watch_and_get_operations(server_address: str) -> None:
    async with AsyncClient(server_address) as client:
        started = await client.start_fill_qrels(fill_request(ORACLE))
        assert started.request_id  # generated, so that a retry starts nothing new
        *_, ended = [o async for o in client.watch_operation(started.name)]
        filled = operation_result(ended)
        assert isinstance(filled, eval_pb2.FillQrelsResponse) and len(filled.added) == HOLES
        assert (await client.get_operation(started.name.split("/")[1])) == ended
        assert [o.name async for o in client.list_operations()] == [started.name]

    def in_a_thread() -> None:
        with Client(server_address) as client:
            again = client.start_fill_qrels(fill_request(ORACLE, seed=1))
            *_, ended = client.watch_operation(again.name)
            assert ended.state == rank_pb2.JOB_STATE_SUCCEEDED
            assert client.cancel_operation(again.name) == ended  # a finished one stays as it is
            assert [o.name for o in client.list_operations(page_size=1)] == [
                again.name,
                started.name,
            ]

    await anyio.to_thread.run_sync(in_a_thread)


async def test_a_unary_caller_that_gives_up_cancels_its_operation(
    llm_server_address: str, fake_llm: FakeLLMServer
) -> None:
    answer_then_hang(fake_llm, answered=1)
    async with grpc.aio.insecure_channel(llm_server_address) as channel:
        stub = eval_pb2_grpc.EvalServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as gone:
            await stub.FillQrels(fill_request(), timeout=3)
        assert gone.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        while True:
            (operation,) = (await stub.ListOperations(eval_pb2.ListOperationsRequest())).operations
            if operation.state != rank_pb2.JOB_STATE_RUNNING:
                break
            await anyio.sleep(0.05)
        assert operation.state == rank_pb2.JOB_STATE_CANCELLED
        assert len(fake_llm.requests("openai")) == 2  # one answered, one cut off
