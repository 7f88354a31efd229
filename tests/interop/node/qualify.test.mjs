// A Node.js client, built from proto/tierank/v1/eval.proto and rank.proto at run time, uses the
// judge-qualification API at $TIERANK_ADDRESS (TLS and bearer key as in rank.test.mjs): it lists
// the rubric presets, qualifies the offline oracle judge on a small labelled set, and creates a
// job that takes the judge's weight from that qualification; and runs a qualification as an
// operation, watched to its result over a server stream.
//
//   TIERANK_ADDRESS=127.0.0.1:50051 node --test tests/interop/node/qualify.test.mjs
import assert from "node:assert/strict";
import { test } from "node:test";

import grpc from "@grpc/grpc-js";

import { address, credentials, loadTierank, unary } from "./tierank.mjs";

const v1 = loadTierank(["tierank/v1/eval.proto", "tierank/v1/rank.proto"]);

// Qualification runs as many calls as the labelled set needs: no deadline.
const call = (client, method, request) => unary(client, method, request, 0);

// Eight queries of eight passages, two of each grade 0..3; the oracle reads the grade.
function labelledSet() {
  const qrels = [];
  const topics = [];
  const passages = [];
  for (let q = 0; q < 8; q++) {
    topics.push(`q${q}\tquestion ${q}`);
    for (let d = 0; d < 8; d++) {
      const doc = `q${q}d${d}`;
      qrels.push(`q${q} 0 ${doc} ${d % 4}`);
      passages.push(JSON.stringify({ id: doc, text: `passage ${doc}`, metadata: { score: `${d % 4}` } }));
    }
  }
  const file = (name, lines) => ({ name, content: `${lines.join("\n")}\n` });
  return { qrels: file("qrels", qrels), topics: file("topics", topics), passages: file("passages", passages) };
}

const ORACLE = { provider: "oracle", parameters: { options: { noise: "0.3" } } };

test("rubric presets are listed", async () => {
  const evals = new v1.EvalService(address, credentials());
  const listed = await call(evals, "ListRubrics", {});
  const names = listed.presets.map((p) => p.name);
  assert.ok(names.includes("context-relevance"), names.join(", "));
  assert.ok(listed.presets.every((p) => p.version >= 1 && p.text.length > 0));
  evals.close();
});

test("a judge is qualified and a job takes its weight from it", async () => {
  const evals = new v1.EvalService(address, credentials());
  const ranks = new v1.RankService(address, credentials());
  const result = await call(evals, "QualifyJudge", { judge: ORACLE, batch_size: 8, ...labelledSet() });
  assert.equal(result.usable, true, result.verdict);
  assert.match(result.verdict, /^usable: pair accuracy/);
  assert.ok(result.listwise.pair_accuracy.low > 0.5);
  assert.equal(result.listwise.first_position.length, 8);
  assert.match(result.name, /^qualifications\//);

  const listed = await call(evals, "ListQualifications", { judge_identity: result.judge_identity });
  assert.equal(listed.qualifications[0].name, result.name);

  const job = await call(ranks, "CreateJob", {
    spec: {
      query: "which passage is best",
      candidates: [0, 1, 2, 3].map((i) => ({ id: `c${i}`, text: `text ${i}`, metadata: { score: `${i}` } })),
      judges: [{ ...ORACLE, weight_from_qualification: true }],
    },
    view: "JOB_VIEW_FULL",
  });
  assert.equal(job.spec.judges[0].qualification, result.name);
  assert.ok(Math.abs(job.spec.judges[0].weight - result.weight) < 1e-9);
  evals.close();
  ranks.close();
});

test("a bad size names its field", async () => {
  const evals = new v1.EvalService(address, credentials());
  await assert.rejects(call(evals, "QualifyJudge", { judge: ORACLE, batch_size: 1, ...labelledSet() }), (error) => {
    assert.equal(error.code, grpc.status.INVALID_ARGUMENT);
    assert.match(error.details, /batch_size/);
    return true;
  });
  evals.close();
});

test("a qualification runs as an operation that can be watched to its result", async () => {
  const evals = new v1.EvalService(address, credentials());
  const started = await call(evals, "StartQualifyJudge", { judge: ORACLE, batch_size: 8, ...labelledSet() });
  assert.match(started.name, /^operations\//);
  assert.equal(started.method, "QualifyJudge");
  assert.ok(Number(started.progress.planned_calls) > 0);

  const watched = [];
  for await (const operation of evals.WatchOperation({ name: started.name })) watched.push(operation);
  const last = watched.at(-1);
  assert.equal(last.state, "JOB_STATE_SUCCEEDED");
  assert.equal(last.result, "qualification");
  assert.match(last.qualification.name, /^qualifications\//);
  assert.equal(last.progress.done_calls, started.progress.planned_calls);

  const got = await call(evals, "GetOperation", { name: started.name });
  assert.equal(got.qualification.name, last.qualification.name);
  evals.close();
});
