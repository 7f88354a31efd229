// What the Node.js interop tests share: the server's address, credentials and the tierank.v1
// services built from proto/ at run time. $TIERANK_ADDRESS names the server; with
// $TIERANK_TLS_CA the client speaks TLS trusting that CA, and with $TIERANK_API_KEY it sends
// `authorization: Bearer` on every call.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

import grpc from "@grpc/grpc-js";
import protoLoader from "@grpc/proto-loader";
import protobuf from "protobufjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const protoRoot = path.resolve(here, "../../../proto");
const caPath = process.env.TIERANK_TLS_CA;

export const address = process.env.TIERANK_ADDRESS;
export const apiKey = process.env.TIERANK_API_KEY;

// grpc-js sends call credentials (the bearer key) only over a secure channel.
export function credentials(key = apiKey) {
  if (!caPath) return grpc.credentials.createInsecure();
  const tls = grpc.credentials.createSsl(fs.readFileSync(caPath));
  if (!key) return tls;
  const bearer = grpc.credentials.createFromMetadataGenerator((_, callback) => {
    const metadata = new grpc.Metadata();
    metadata.add("authorization", `Bearer ${key}`);
    callback(null, metadata);
  });
  return grpc.credentials.combineChannelCredentials(tls, bearer);
}

// The tierank.v1 package of the given .proto files. google/protobuf/timestamp.proto is not in
// protoRoot: proto-loader resolves the well-known types from the copies protobufjs bundles.
export function loadTierank(files) {
  const definition = protoLoader.loadSync(files, {
    includeDirs: [protoRoot],
    keepCase: true,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  return grpc.loadPackageDefinition(definition).tierank.v1;
}

// A unary call as a promise; `deadlineMs` 0 sets no deadline.
export function unary(client, method, request, deadlineMs = 10_000) {
  const options = deadlineMs ? { deadline: Date.now() + deadlineMs } : {};
  return new Promise((resolve, reject) => {
    client[method](request, options, (error, response) =>
      error ? reject(error) : resolve(response),
    );
  });
}

// The fields of google/rpc/status.proto and error_details.proto that the tests read (those
// files are not in proto/); field numbers as Google's, so they decode the real messages.
const rpcTypes = protobuf.Root.fromJSON(protobuf.common.get("google/protobuf/any.proto"));
protobuf.parse(
  `syntax = "proto3";
  package google.rpc;
  import "google/protobuf/any.proto";
  message Status { int32 code = 1; string message = 2; repeated google.protobuf.Any details = 3; }
  message BadRequest {
    message FieldViolation { string field = 1; string description = 2; }
    repeated FieldViolation field_violations = 1;
  }`,
  rpcTypes,
  { keepCase: true },
);
const RpcStatus = rpcTypes.lookupType("google.rpc.Status");
const BadRequest = rpcTypes.lookupType("google.rpc.BadRequest");

// The google.rpc.BadRequest field violations of a failed call ({field, description} each),
// from its `grpc-status-details-bin` trailer; none when the error carries no BadRequest.
export function fieldViolations(error) {
  const [details] = error.metadata?.get("grpc-status-details-bin") ?? [];
  if (!details) return [];
  return RpcStatus.decode(details)
    .details.filter((detail) => detail.type_url.endsWith("/google.rpc.BadRequest"))
    .flatMap((detail) => BadRequest.decode(detail.value).field_violations);
}
