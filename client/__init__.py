"""Python client for tierank: `AsyncClient` (grpc.aio), `Client` (blocking), and spec builders.

Jobs and events are returned as the generated messages, re-exported here as `Job`, `JobEvent`,
`JobSpec`, `Tier`: they are the service's documented contract (see tierank.client.aio).

    from tierank.client import AsyncClient, job_spec

    spec = job_spec("what is BM25?", [{"id": "d1", "text": "..."}], judges=["lexical"])
    async with AsyncClient("127.0.0.1:50051") as client:
        async for event in client.rank(spec):
            print(event.sequence, event.WhichOneof("kind"))

QualifyJudge and FillQrels run for minutes, as operations: `start_qualify_judge` and
`start_fill_qrels` return one at once; `watch_operation` follows its progress to the end, and
`operation_result` gives its result (or raises its failure).

A server run with keys and TLS: `AsyncClient("tierank.example:443", api_key=key,
tls_ca="ca.pem")` (see `AsyncClient` for every option).
"""

import os

# Unless told otherwise before it is first imported, gRPC core (1.65 on) leaves abseil's default
# and writes INFO lines on stderr, e.g. one per failed TLS handshake, around the CLI's one-line
# errors, which already carry the reason. ERROR was gRPC's documented default; an explicit
# $GRPC_VERBOSITY still wins.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

from tierank.client._connection import ConnectionSettingsError
from tierank.client._errors import ErrorInfo, FieldViolation, TierankError
from tierank.client._names import job_name, reason_name, state_name
from tierank.client._operations import operation_result
from tierank.client._resume import ReconnectPolicy
from tierank.client._spec import candidate, candidate_from_dict, job_spec, judge
from tierank.client.aio import AsyncClient
from tierank.client.local_server import LocalServer, LocalServerError
from tierank.client.sync import Client
from tierank.resources import is_terminal_event as is_terminal
from tierank.v1.rank_pb2 import Job, JobEvent, JobSpec, Tier

__all__ = [
    "AsyncClient",
    "Client",
    "ConnectionSettingsError",
    "ErrorInfo",
    "FieldViolation",
    "Job",
    "JobEvent",
    "JobSpec",
    "LocalServer",
    "LocalServerError",
    "ReconnectPolicy",
    "Tier",
    "TierankError",
    "candidate",
    "candidate_from_dict",
    "is_terminal",
    "job_name",
    "job_spec",
    "judge",
    "operation_result",
    "reason_name",
    "state_name",
]
