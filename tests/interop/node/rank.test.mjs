// A Node.js client, built from proto/tierank/v1/rank.proto at run time, drives a tierank server
// at $TIERANK_ADDRESS: it creates a job with the offline lexical judge, follows WatchJob to the
// end and checks what any client in any language relies on, with grpc-js's default limits
// (4 MiB received, 8 KiB of response headers), which the Python tests can only imitate.
// With $TIERANK_TLS_CA it speaks TLS trusting that CA, and with $TIERANK_API_KEY it sends
// `authorization: Bearer` on every call; $TIERANK_OTHER_API_KEY is a key of another tenant.
//
//   TIERANK_ADDRESS=127.0.0.1:50051 node --test tests/interop/node/
import assert from "node:assert/strict";
import { test } from "node:test";

import grpc from "@grpc/grpc-js";

import { address, apiKey, credentials, loadTierank, unary } from "./tierank.mjs";

const otherApiKey = process.env.TIERANK_OTHER_API_KEY;

function loadRankService() {
  return loadTierank("tierank/v1/rank.proto").RankService;
}

const POOL = [
  ["owl", "Owls hunt at night, locating mice by sound with asymmetric ears."],
  ["bat", "Bats hunt insects at night using echolocation."],
  ["hawk", "Hawks hunt by day with extremely sharp eyesight."],
  ["cow", "Cows graze on grass in the daytime."],
  ["moth", "Moths fly towards lamps at night, and many of them are eaten by bats."],
  ["fox", "Foxes often hunt at night and at dusk for small mammals."],
];

function watch(client, name) {
  return new Promise((resolve, reject) => {
    const events = [];
    const call = client.WatchJob(
      { name, after_sequence: 0 },
      { deadline: Date.now() + 30_000 },
    );
    call.on("data", (event) => events.push(event));
    call.on("error", reject);
    call.on("end", () => resolve(events));
  });
}

// The job's first tiers_updated event: each one lists all 10,000 candidates.
function firstTiersUpdate(client, name) {
  return new Promise((resolve, reject) => {
    const call = client.WatchJob({ name, after_sequence: 0 }, { deadline: Date.now() + 60_000 });
    call.on("data", (event) => {
      if (event.kind === "tiers_updated") {
        resolve(event);
        call.cancel();
      }
    });
    call.on("error", (error) => {
      if (error.code !== grpc.status.CANCELLED) reject(error);
    });
  });
}

test("a Node client ranks a pool end to end", async () => {
  assert.ok(address, "set TIERANK_ADDRESS to a running tierank server (host:port)");
  const RankService = loadRankService();
  const client = new RankService(address, credentials());
  try {
    const job = await unary(client, "CreateJob", {
      spec: {
        query: "animals that hunt at night",
        candidates: POOL.map(([id, text]) => ({ id, text, metadata: {} })),
        judges: [{ provider: "lexical", model: "bm25" }],
        batch_size: 3,
        seed: 11,
      },
      request_id: `node-interop-${process.pid}-${Date.now()}`,
    });
    assert.match(job.name, /^jobs\/.+/);

    const events = await watch(client, job.name);
    const sequences = events.map((event) => Number(event.sequence));
    assert.deepEqual(sequences, sequences.map((_, index) => index + 1), "gap-free from 1");
    assert.equal(events[0].kind, "accepted");
    assert.ok(events.every((event) => event.job === job.name));

    const last = events.at(-1);
    assert.equal(last.kind, "completed");
    assert.equal(last.completed.reason, "COMPLETION_REASON_SETTLED");
    const ranked = last.completed.tiers.flatMap((tier) => tier.candidate_ids);
    assert.deepEqual([...ranked].sort(), POOL.map(([id]) => id).sort(), "each candidate once");
    assert.deepEqual(
      last.completed.tiers.map((tier) => tier.rank),
      last.completed.tiers.map((_, index) => index + 1),
    );

    const final = await unary(client, "GetJob", { name: job.name });
    assert.equal(final.state, "JOB_STATE_SUCCEEDED");
    assert.equal(Number(final.last_sequence), sequences.at(-1));
    assert.ok(final.create_time.seconds > 0, "Timestamp decoded");
  } finally {
    client.close();
  }
});

test("a budget too small for the pool goes to its head, and the tiers stay whole", async () => {
  const RankService = loadRankService();
  const client = new RankService(address, credentials());
  try {
    // 50 candidates, the oracle ranks by `score` (c000 best); showing all once takes 5 calls.
    const ids = Array.from({ length: 50 }, (_, i) => `c${String(i).padStart(3, "0")}`);
    const job = await unary(client, "CreateJob", {
      spec: {
        query: "which passage is best",
        candidates: ids.map((id, i) => ({ id, text: `passage ${i}`, metadata: { score: `${50 - i}` } })),
        judges: [{ provider: "oracle", parameters: { options: { noise: "0" } } }],
        top_k: 5,
        budget: { max_judge_calls: 3 },
      },
      request_id: `node-budget-${process.pid}-${Date.now()}`,
    });
    const events = await watch(client, job.name);
    const last = events.at(-1);
    assert.equal(last.completed.reason, "COMPLETION_REASON_BUDGET_EXHAUSTED");
    const verdicts = events.filter((event) => event.kind === "verdict").map((e) => e.verdict);
    assert.equal(verdicts.length, 3);
    const shown = new Set(verdicts.flatMap((verdict) => verdict.presented));
    assert.deepEqual([...shown].sort(), ids.slice(0, 20), "the first wave covers the head");
    const ranked = last.completed.tiers.flatMap((tier) => tier.candidate_ids);
    assert.deepEqual([...ranked].sort(), ids, "each candidate once");
    assert.deepEqual(ranked.slice(0, 5), ids.slice(0, 5));
    assert.deepEqual(
      ranked.filter((id) => !shown.has(id)),
      ids.slice(20),
      "never-shown candidates keep the input order",
    );
  } finally {
    client.close();
  }
});

test("errors carry the gRPC status code", async () => {
  assert.ok(address, "set TIERANK_ADDRESS");
  const RankService = loadRankService();
  const client = new RankService(address, credentials());
  try {
    await assert.rejects(unary(client, "GetJob", { name: "jobs/not-a-job" }), {
      code: grpc.status.NOT_FOUND,
    });
    await assert.rejects(
      unary(client, "CreateJob", { spec: { query: "", candidates: [], judges: [] } }),
      { code: grpc.status.INVALID_ARGUMENT },
    );
  } finally {
    client.close();
  }
});

test("every answer about a 10,000-candidate job fits Node's default 4 MiB receive limit", async () => {
  assert.ok(address, "set TIERANK_ADDRESS");
  const RankService = loadRankService();
  // grpc-js's own defaults: 4 MiB received, unlimited sent.
  const client = new RankService(address, credentials());
  try {
    const filler = "honeybees dance to share where the flowers are, ".repeat(11);
    const candidates = Array.from({ length: 10_000 }, (_, i) => ({
      id: `doc-${String(i).padStart(5, "0")}`,
      text: `${i} ${filler}`,
      metadata: {},
    }));
    const job = await unary(client, "CreateJob", {
      spec: {
        query: "how do honeybees tell each other where food is",
        candidates,
        judges: [{ provider: "lexical" }],
        top_k: 10,
      },
    });
    assert.equal(job.candidate_count, 10_000);
    assert.equal(job.spec.candidates.length, 10_000, "ids kept in the basic view");
    assert.equal(job.spec.candidates[0].text, "", "texts left out of the basic view");

    const listed = await unary(client, "ListJobs", {});
    assert.ok(listed.jobs.some((listedJob) => listedJob.name === job.name));
    const tiers = await firstTiersUpdate(client, job.name);
    assert.equal(tiers.tiers_updated.total_count, 10_000);
    const cancelled = await unary(client, "CancelJob", { name: job.name });
    assert.match(cancelled.state, /JOB_STATE_(CANCELLED|SUCCEEDED)/);
    const final = await unary(client, "GetJob", { name: job.name });
    assert.equal(final.tiers.flatMap((tier) => tier.candidate_ids).length, 10_000);
  } finally {
    client.close();
  }
});

test("an error naming hundreds of broken fields fits Node's default header limit", async () => {
  assert.ok(address, "set TIERANK_ADDRESS");
  const RankService = loadRankService();
  const client = new RankService(address, credentials());
  try {
    const candidates = Array.from({ length: 300 }, (_, i) => ({ id: `c${i}`, text: " " }));
    const judges = [{ provider: "x".repeat(6000) }];
    await assert.rejects(
      unary(client, "CreateJob", { spec: { query: "q", candidates, judges } }),
      (error) => {
        assert.equal(error.code, grpc.status.INVALID_ARGUMENT, error.details);
        assert.match(error.details, /and \d+ more/);
        return true;
      },
    );
  } finally {
    client.close();
  }
});

test("without a key, with a wrong one, or as another tenant, a Node client gets nothing", async (t) => {
  if (!apiKey || !otherApiKey) {
    t.skip("set TIERANK_API_KEY and TIERANK_OTHER_API_KEY to test authentication");
    return;
  }
  const RankService = loadRankService();
  const owner = new RankService(address, credentials());
  const keyless = new RankService(address, credentials(""));
  const wrong = new RankService(address, credentials(`${apiKey.slice(0, -4)}AAAA`));
  const other = new RankService(address, credentials(otherApiKey));
  try {
    const job = await unary(owner, "CreateJob", {
      spec: {
        query: "which animals hunt at night",
        candidates: POOL.map(([id, text]) => ({ id, text })),
        judges: [{ provider: "lexical" }],
      },
    });
    for (const client of [keyless, wrong]) {
      await assert.rejects(unary(client, "GetJob", { name: job.name }), {
        code: grpc.status.UNAUTHENTICATED,
      });
    }
    await assert.rejects(unary(other, "GetJob", { name: job.name }), {
      code: grpc.status.NOT_FOUND,
    });
    await assert.rejects(unary(other, "CancelJob", { name: job.name }), {
      code: grpc.status.NOT_FOUND,
    });
    const listed = await unary(other, "ListJobs", {});
    assert.equal(listed.jobs.length, 0);
    const mine = await unary(owner, "GetJob", { name: job.name });
    assert.equal(mine.name, job.name);
  } finally {
    for (const client of [owner, keyless, wrong, other]) client.close();
  }
});
