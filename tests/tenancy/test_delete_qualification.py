"""DeleteQualification sees only the caller's tenant (issue 22, item 26): another tenant's
qualification is NOT_FOUND exactly like a missing one, and stays."""

from __future__ import annotations

import json

import grpc
import pytest

from tierank.client import judge
from tierank.v1 import eval_pb2

GRADES = (3, 2, 1, 0, 3, 2, 1, 0)


def qualify_request() -> eval_pb2.QualifyJudgeRequest:
    """An oracle judge measured on two queries whose passages carry their grade as the score."""
    qrels, topics, passages = [], [], []
    for q in range(2):
        topics.append(f"q{q}\tquestion {q}")
        for d, grade in enumerate(GRADES):
            doc = f"q{q}d{d}"
            qrels.append(f"q{q} 0 {doc} {grade}")
            passages.append(
                json.dumps({"id": doc, "text": f"about {q}", "metadata": {"score": grade}})
            )
    return eval_pb2.QualifyJudgeRequest(
        judge=judge("oracle", options={"noise": "0"}),
        qrels=eval_pb2.TextFile(name="qrels", content="\n".join(qrels)),
        topics=eval_pb2.TextFile(name="topics", content="\n".join(topics)),
        passages=eval_pb2.TextFile(name="passages", content="\n".join(passages)),
        batch_size=4,
    )


async def test_only_the_owning_tenant_deletes_its_qualification(keyed_server) -> None:
    alice = keyed_server.session(await keyed_server.member_key("team-a"))
    bob = keyed_server.session(await keyed_server.member_key("team-b"))
    made = await alice.eval.QualifyJudge(qualify_request(), metadata=alice.metadata)
    missing = "qualifications/000000000000000000000000"

    with pytest.raises(grpc.aio.AioRpcError) as crossed:
        await bob.eval.DeleteQualification(
            eval_pb2.DeleteQualificationRequest(name=made.name), metadata=bob.metadata
        )
    with pytest.raises(grpc.aio.AioRpcError) as absent:
        await bob.eval.DeleteQualification(
            eval_pb2.DeleteQualificationRequest(name=missing), metadata=bob.metadata
        )
    assert crossed.value.code() == absent.value.code() == grpc.StatusCode.NOT_FOUND
    assert crossed.value.details().replace(made.name, missing) == absent.value.details()
    kept = await alice.eval.ListQualifications(
        eval_pb2.ListQualificationsRequest(), metadata=alice.metadata
    )
    assert [q.name for q in kept.qualifications] == [made.name]

    deleted = await alice.eval.DeleteQualification(
        eval_pb2.DeleteQualificationRequest(name=made.name), metadata=alice.metadata
    )
    assert deleted == made
    left = await alice.eval.ListQualifications(
        eval_pb2.ListQualificationsRequest(), metadata=alice.metadata
    )
    assert list(left.qualifications) == []


async def test_a_malformed_name_is_a_field_violation(keyed_server) -> None:
    alice = keyed_server.session(await keyed_server.member_key("team-a"))
    with pytest.raises(grpc.aio.AioRpcError) as bad:
        await alice.eval.DeleteQualification(
            eval_pb2.DeleteQualificationRequest(name="jobs/abc"), metadata=alice.metadata
        )
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "name: must look like 'qualifications/{id}'" in bad.value.details()
