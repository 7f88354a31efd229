"""Server reflection under both names clients ask for: grpc.reflection.v1 and v1alpha.

grpcio-reflection implements only v1alpha, while current grpcurl and most clients try
grpc.reflection.v1 first. The two protocols are the same messages under another package
(wire-identical), so the v1alpha servicer's handler is registered under the v1 name too.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2

V1_SERVICE_NAME = "grpc.reflection.v1.ServerReflection"
# Both names, for the interceptor: with --auth keys, reflection needs a key.
REFLECTION_SERVICES = (V1_SERVICE_NAME, reflection.SERVICE_NAME)


def enable_reflection(services: Sequence[str], server: grpc.aio.Server) -> None:
    names = [*services, *REFLECTION_SERVICES]
    servicer = reflection.aio.ReflectionServicer(names)
    handler = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    for service in REFLECTION_SERVICES:
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(service, {"ServerReflectionInfo": handler}),)
        )
