#!/usr/bin/env python3
"""Container health probe: exit 0 only if the tierank server answers grpc.health.v1 Check with
SERVING, over TLS; with --alive, if it answers at all.

Kubernetes' built-in `grpc:` probe cannot speak TLS, so the probes exec this script instead
(the image installs it as `tierank-healthcheck`). Readiness wants SERVING; liveness wants
--alive, because a server reports NOT_SERVING while its database is unreachable and recovers
by itself when it comes back: a restart then would only add a cold start to the outage.

The health service needs no API key; with mutual TLS, the probe presents its own client
certificate (--cert, --key). It imports only grpcio and grpc_health, never tierank, so it
stays quick to start.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tierank-healthcheck",
        description="Ask a tierank server over TLS whether it is SERVING; exit 0 if so, 1 if not.",
    )
    p.add_argument(
        "--alive",
        action="store_true",
        help="exit 0 if the server answers at all, SERVING or not (for liveness probes)",
    )
    p.add_argument("--address", default="127.0.0.1:50051", help="host:port of the server")
    p.add_argument(
        "--ca",
        type=Path,
        help="PEM CA bundle that signed the server's certificate (default: gRPC's own roots)",
    )
    p.add_argument(
        "--server-name",
        help="a name in the server's certificate, when --address is not one (a probe inside "
        "the pod dials 127.0.0.1, the certificate names the Service)",
    )
    p.add_argument("--cert", type=Path, help="PEM client certificate, for mutual TLS")
    p.add_argument("--key", type=Path, help="PEM private key of --cert")
    p.add_argument("--timeout", type=float, default=3.0, help="seconds to wait (default 3)")
    return p


def check(args: argparse.Namespace) -> str | None:
    """None when the server is SERVING (with --alive: answers), else why not, in one line."""
    credentials = grpc.ssl_channel_credentials(
        root_certificates=args.ca.read_bytes() if args.ca else None,
        private_key=args.key.read_bytes() if args.key else None,
        certificate_chain=args.cert.read_bytes() if args.cert else None,
    )
    options = [("grpc.ssl_target_name_override", args.server_name)] if args.server_name else []
    with grpc.secure_channel(args.address, credentials, options) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=args.timeout
            )
        except grpc.RpcError as error:
            return f"{error.code().name}: {error.details()}"
    if not args.alive and reply.status != health_pb2.HealthCheckResponse.SERVING:
        return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    return None


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if (args.cert is None) != (args.key is None):
        parser().error("--cert and --key go together")
    try:
        problem = check(args)
    except OSError as error:
        problem = f"cannot read {error.filename}: {error.strerror}"
    if problem is not None:
        print(f"tierank-healthcheck: {args.address}: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
