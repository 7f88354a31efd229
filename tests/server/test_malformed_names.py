"""A resource name (or tenant id) with anything around a valid id is refused at the edge as
INVALID_ARGUMENT naming the field, in every RPC that takes one, over real gRPC: a lookup must
never run on `abc!!` or `abc/extra` and answer NOT_FOUND (or worse, find a resource by a prefix
of what was asked)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import grpc
import pytest

from tierank.client._errors import error_from_rpc
from tierank.v1 import admin_pb2, admin_pb2_grpc, eval_pb2, eval_pb2_grpc, rank_pb2, rank_pb2_grpc

# A valid id with something after it, too long by one, or empty. Each but the empty one starts
# with a prefix that a lax match (`re.match` for `re.fullmatch`) would accept.
BAD_IDS = ["abc!!", "abc/extra", "abc def", "a" * 65, ""]


def _names(collection: str) -> list[str]:
    return [f"{collection}/{bad}" for bad in BAD_IDS] + [f"{collection}s/abc", "abc"]


@dataclass(frozen=True)
class Stubs:
    rank: rank_pb2_grpc.RankServiceStub
    evals: eval_pb2_grpc.EvalServiceStub
    admin: admin_pb2_grpc.AdminServiceStub


@pytest.fixture
async def stubs(server_address: str) -> AsyncIterator[Stubs]:
    async with grpc.aio.insecure_channel(server_address) as channel:
        yield Stubs(
            rank_pb2_grpc.RankServiceStub(channel),
            eval_pb2_grpc.EvalServiceStub(channel),
            admin_pb2_grpc.AdminServiceStub(channel),
        )


async def _first(stream: grpc.aio.UnaryStreamCall) -> object:
    return await stream.read()


def _export(stubs: Stubs, job: str) -> Awaitable[object]:
    tiers = eval_pb2.TierLabels(jobs=[eval_pb2.JobTiers(job=job, query_id="q1")])
    return stubs.evals.ExportQrels(eval_pb2.ExportQrelsRequest(tiers=tiers))


Call = Callable[[Stubs, str], Awaitable[object]]
# RPC -> (the field that carries the name, its malformed values, the call with one of them).
CASES: dict[str, tuple[str, list[str], Call]] = {
    "GetJob": ("name", _names("jobs"), lambda s, n: s.rank.GetJob(rank_pb2.GetJobRequest(name=n))),
    "CancelJob": (
        "name",
        _names("jobs"),
        lambda s, n: s.rank.CancelJob(rank_pb2.CancelJobRequest(name=n)),
    ),
    "WatchJob": (
        "name",
        _names("jobs"),
        lambda s, n: _first(s.rank.WatchJob(rank_pb2.WatchJobRequest(name=n))),
    ),
    "GetVerdict": (
        "name",
        [f"jobs/{bad}/verdicts/1" for bad in BAD_IDS]
        + [f"jobs/abc/verdicts/{bad}" for bad in BAD_IDS],
        lambda s, n: s.rank.GetVerdict(rank_pb2.GetVerdictRequest(name=n)),
    ),
    "ExportQrels": ("tiers.jobs[0].job", _names("jobs"), _export),
    "GetOperation": (
        "name",
        _names("operations"),
        lambda s, n: s.evals.GetOperation(eval_pb2.GetOperationRequest(name=n)),
    ),
    "CancelOperation": (
        "name",
        _names("operations"),
        lambda s, n: s.evals.CancelOperation(eval_pb2.CancelOperationRequest(name=n)),
    ),
    "WatchOperation": (
        "name",
        _names("operations"),
        lambda s, n: _first(s.evals.WatchOperation(eval_pb2.WatchOperationRequest(name=n))),
    ),
    "DeleteQualification": (
        "name",
        _names("qualifications"),
        lambda s, n: s.evals.DeleteQualification(eval_pb2.DeleteQualificationRequest(name=n)),
    ),
    "RevokeApiKey": (
        "name",
        _names("keys"),
        lambda s, n: s.admin.RevokeApiKey(admin_pb2.RevokeApiKeyRequest(name=n)),
    ),
    # A tenant is named by its bare id: the same rule without a collection.
    "GetTenant": (
        "tenant",
        BAD_IDS,
        lambda s, t: s.admin.GetTenant(admin_pb2.GetTenantRequest(tenant=t)),
    ),
}


@pytest.mark.parametrize("rpc", list(CASES))
async def test_a_malformed_name_is_invalid_argument_naming_its_field(stubs, rpc):
    field, names, call = CASES[rpc]
    answers: dict[str, tuple[grpc.StatusCode, list[str]]] = {}
    for name in names:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call(stubs, name)
        violations = [v.field for v in error_from_rpc(caught.value).field_violations]
        answers[name] = (caught.value.code(), violations)
    assert answers == {name: (grpc.StatusCode.INVALID_ARGUMENT, [field]) for name in names}
