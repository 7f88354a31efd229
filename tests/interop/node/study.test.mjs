// A Node.js client, built from proto/tierank/v1/study.proto at run time, runs a whole study at
// $TIERANK_ADDRESS (TLS and bearer key as in rank.test.mjs): a synthetic collection of three
// systems of known quality, sent in chunks cut by their encoded size, one chunk sent twice,
// started, watched to its end, then read back: the report, every query page by page, and the
// labels as TREC qrels. The `oracle` judge reads each passage's hidden grade (metadata
// "score"), with noise, so the true order of the systems is known.
//
// $TIERANK_STUDY_QUERIES sets the study's size: 300 queries by default (more than
// max_live_queries, and several chunks); the 10,000 is an opt-in for a machine with time
// to spare.
//
//   TIERANK_ADDRESS=127.0.0.1:50051 node --test tests/interop/node/study.test.mjs
import assert from "node:assert/strict";
import { test } from "node:test";

import grpc from "@grpc/grpc-js";

import { address, credentials, fieldViolations, loadTierank, unary } from "./tierank.mjs";

const { StudyService } = loadTierank("tierank/v1/study.proto");

const QUERIES = Number(process.env.TIERANK_STUDY_QUERIES || 300);
const DOCUMENTS_PER_QUERY = 10;
const DEPTH = 5;
// How far each system's scores stray from the true grade: `poor` ignores the grade altogether.
const SYSTEMS = {
  good: { weight: 1, noise: 0.3 },
  fair: { weight: 1, noise: 1.5 },
  poor: { weight: 0, noise: 1 },
};
// A quarter of what tierank's own client cuts (1 MiB, a quarter of gRPC's default 4 MiB receive
// limit), so that the default study spans several chunks: 300 queries encode to about 390 KB.
const CHUNK_BYTES = 256 * 1024;
// Room for a chunk's `study` and `request_id`, which the per-query sizes leave out.
const HEADER_BYTES = 512;
// A study that never ends fails the watch here, within the 5 minutes a CI step can give it.
const STUDY_LIMIT_MS = 280_000;
const ORACLE = { provider: "oracle", parameters: { options: { noise: "0.5" } } };
// Grades from each pool's order: the default bands (1-10 -> 3) would give a whole pool of at
// most 10 documents the same grade, and every system the same score.
const LABELS = {
  rank_bands: {
    bands: [
      { last_position: 1, grade: 3 },
      { last_position: 3, grade: 2 },
      { last_position: 5, grade: 1 },
    ],
    below: 0,
  },
};
// Calls the server may have failed to answer: sent again under the same request_id.
const RETRIED = new Set([grpc.status.UNAVAILABLE, grpc.status.DEADLINE_EXCEEDED]);

// A seeded generator (mulberry32), so that every run judges the same collection.
function seeded(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// Each query's topic, its documents' grades, every system's run over them, and its pool: the
// union of each system's top DEPTH in trec_eval's order (score descending, then doc id
// descending), which is what the server judges.
function collection(queries) {
  const random = seeded(23);
  const gauss = () => Math.sqrt(-2 * Math.log(1 - random())) * Math.cos(2 * Math.PI * random());
  return Array.from({ length: queries }, (_, q) => {
    const query_id = `q${String(q).padStart(5, "0")}`;
    const grades = new Map();
    for (let d = 0; d < DOCUMENTS_PER_QUERY; d++) {
      grades.set(`${query_id}-d${d}`, [0, 0, 0, 1, 1, 2, 3][Math.floor(random() * 7)]);
    }
    const runs = Object.entries(SYSTEMS).map(([system, { weight, noise }]) => ({
      system,
      entries: [...grades].map(([doc_id, grade]) => ({
        query_id,
        doc_id,
        score: weight * grade + noise * gauss(),
      })),
    }));
    const pool = new Set(
      runs.flatMap((run) =>
        [...run.entries]
          .sort((a, b) => b.score - a.score || (a.doc_id < b.doc_id ? 1 : -1))
          .slice(0, DEPTH)
          .map((entry) => entry.doc_id),
      ),
    );
    return { query_id, text: `topic number ${q}`, grades, runs, pool };
  });
}

// The inputs as AddStudyInputs requests of at most CHUNK_BYTES each. A protobuf message is the
// concatenation of its fields, so a chunk is no larger than the sum of its queries' inputs
// encoded on their own (merging a system's entries only saves bytes): each query is measured
// once with the very serializer grpc-js sends with. Only pooled documents' passages are sent.
function chunks(queries, requestId) {
  const encode = StudyService.service.AddStudyInputs.requestSerialize;
  const parts = queries.map((query) => ({
    topics: [{ query_id: query.query_id, text: query.text }],
    runs: query.runs,
    passages: [...query.pool].map((doc_id) => ({
      doc_id,
      text: `passage ${doc_id}`,
      metadata: { score: String(query.grades.get(doc_id)) },
    })),
  }));
  const groups = [];
  let group = [];
  let bytes = HEADER_BYTES;
  for (const part of parts) {
    const size = encode(part).length;
    if (group.length && bytes + size > CHUNK_BYTES) {
      groups.push(group);
      [group, bytes] = [[], HEADER_BYTES];
    }
    group.push(part);
    bytes += size;
  }
  groups.push(group);
  return groups.map((members, i) => ({
    request_id: `${requestId}-c${i + 1}`,
    topics: members.flatMap((part) => part.topics),
    runs: Object.keys(SYSTEMS).map((system) => ({
      system,
      entries: members.flatMap((part) => part.runs.find((run) => run.system === system).entries),
    })),
    passages: members.flatMap((part) => part.passages),
  }));
}

// A chunk is sent again after an answer that may have been lost: its request_id makes the
// server add it once.
async function addInputs(client, request, attempts = 5) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await unary(client, "AddStudyInputs", request, 60_000);
    } catch (error) {
      if (attempt === attempts || !RETRIED.has(error.code)) throw error;
      await new Promise((resolve) => setTimeout(resolve, 200 * 2 ** attempt));
    }
  }
}

// Every message of WatchStudy, with when it came, until the stream closes after the study's
// final state.
async function watch(client, name) {
  const seen = [];
  const stream = client.WatchStudy({ name }, { deadline: Date.now() + STUDY_LIMIT_MS });
  for await (const study of stream) seen.push({ study, at: Date.now() });
  return seen;
}

const queriesEnded = (progress) => progress.settled + progress.provisional + progress.failed;

// Every page of a paged call, with `page_size` asked for.
async function pages(client, method, name, page_size) {
  const all = [];
  let page_token = "";
  do {
    const page = await unary(client, method, { name, page_size, page_token }, 60_000);
    all.push(page);
    page_token = page.next_page_token;
  } while (page_token);
  return all;
}

test(`a Node client runs a ${QUERIES}-query study of three systems to its report`, async (t) => {
  assert.ok(address, "set TIERANK_ADDRESS to a running tierank server (host:port)");
  const client = new StudyService(address, credentials());
  try {
    const began = Date.now();
    const queries = collection(QUERIES);
    const requestId = `node-study-${process.pid}-${Date.now()}`;
    const study = await unary(client, "CreateStudy", {
      spec: {
        display_name: "grpc-js interop",
        depth: DEPTH,
        ranking: { judges: [ORACLE], top_k: 3 },
        labels: LABELS,
        max_live_queries: 256,
      },
      request_id: requestId,
    });
    assert.equal(study.state, "STUDY_STATE_DRAFT");

    const requests = chunks(queries, requestId);
    if (QUERIES >= 300) assert.ok(requests.length > 1, "the inputs span several chunks");
    let sentBytes = 0;
    for (const request of requests) {
      const size = StudyService.service.AddStudyInputs.requestSerialize(request).length;
      assert.ok(size <= CHUNK_BYTES, `a chunk of ${size} bytes`);
      sentBytes += size;
      const answer = await addInputs(client, { study: study.name, ...request });
      assert.equal(answer.added, true);
    }
    const again = await addInputs(client, { study: study.name, ...requests[0] });
    assert.equal(again.added, false, "a chunk sent twice is added once");
    assert.equal(again.study.inputs.chunks, requests.length);
    assert.equal(again.study.inputs.topics, QUERIES);
    assert.equal(Number(again.study.inputs.run_entries), QUERIES * DOCUMENTS_PER_QUERY * 3);
    assert.deepEqual([...again.study.inputs.systems].sort(), Object.keys(SYSTEMS).sort());
    const uploaded = Date.now();
    t.diagnostic(`sent ${requests.length} chunks, ${sentBytes} bytes, in ${uploaded - began} ms`);

    const pooled = queries.reduce((sum, query) => sum + query.pool.size, 0);
    const started = await unary(client, "StartStudy", { name: study.name }, 60_000);
    assert.equal(started.state, "STUDY_STATE_RUNNING");
    assert.equal(started.progress.queries, QUERIES);
    assert.equal(Number(started.progress.pooled_documents), pooled);

    const watched = await watch(client, study.name);
    const final = watched.at(-1).study;
    const judged = Date.now();
    assert.equal(final.state, "STUDY_STATE_SUCCEEDED", JSON.stringify(final.error));
    assert.equal(final.progress.queries, QUERIES);
    assert.equal(final.progress.settled, QUERIES, "every query's job settled");
    const done = watched.map(({ study: seen }) => queriesEnded(seen.progress));
    assert.deepEqual(done, [...done].sort((a, b) => a - b), "progress never goes back");
    // The report is built once every query has ended, before the study says it succeeded.
    const allEnded = watched.find(({ study: seen }) => queriesEnded(seen.progress) === QUERIES);
    t.diagnostic(
      `judged ${QUERIES} queries (${pooled} pooled documents, ${final.progress.judge_calls} ` +
        `judge calls) in ${judged - uploaded} ms, the last ${judged - allEnded.at} ms of it ` +
        `after every query had ended; ${watched.length} WatchStudy messages`,
    );

    const report = await unary(client, "GetStudyReport", { name: study.name }, 60_000);
    assert.equal(report.state, "STUDY_STATE_SUCCEEDED");
    assert.equal(report.complete, true);
    assert.deepEqual(report.ranking, ["good", "fair", "poor"]);
    assert.equal(report.comparisons.length, 2);
    const comparisons = JSON.stringify(report.comparisons);
    assert.ok(report.comparisons.every((c) => c.distinguishable), comparisons);
    assert.equal(report.queries.length, 0, "per-query results are paged by ListStudyQueries");

    // Several pages of each, whatever the study's size.
    const pageSize = Math.min(1000, Math.ceil(QUERIES / 4));
    const queryPages = await pages(client, "ListStudyQueries", study.name, pageSize);
    assert.equal(queryPages.length, Math.ceil(QUERIES / pageSize));
    const listed = queryPages.flatMap((page) => page.queries);
    assert.deepEqual(
      listed.map((q) => q.query_id),
      queries.map((q) => q.query_id),
      "every query once, in topic order",
    );
    listed.forEach((listedQuery, i) => {
      assert.match(listedQuery.job, /^jobs\/.+/);
      assert.equal(listedQuery.state, "JOB_STATE_SUCCEEDED");
      assert.equal(listedQuery.pool_size, queries[i].pool.size);
      assert.equal(listedQuery.measures.length, 3 * 6, "6 default measures for each system");
    });

    const qrelsPages = await pages(client, "ExportStudyQrels", study.name, pageSize);
    assert.equal(qrelsPages.length, Math.ceil(QUERIES / pageSize));
    const labelled = new Map();
    for (const line of qrelsPages.flatMap((page) => page.qrels.trim().split("\n"))) {
      const [query_id, iteration, doc_id, grade] = line.split(" ");
      assert.equal(iteration, "0");
      assert.match(grade, /^\d+$/);
      if (!labelled.has(query_id)) labelled.set(query_id, new Set());
      labelled.get(query_id).add(doc_id);
    }
    assert.equal(labelled.size, QUERIES, "qrels for every query");
    for (const query of queries) {
      assert.deepEqual([...labelled.get(query.query_id)].sort(), [...query.pool].sort());
    }
    t.diagnostic(`read back in ${Date.now() - judged} ms; ${Date.now() - began} ms in all`);
  } finally {
    client.close();
  }
});

test("a chunk without a request_id is refused, naming the field", async () => {
  const client = new StudyService(address, credentials());
  try {
    const study = await unary(client, "CreateStudy", {
      spec: { ranking: { judges: [ORACLE] } },
      request_id: `node-study-bad-${process.pid}-${Date.now()}`,
    });
    await assert.rejects(
      unary(client, "AddStudyInputs", {
        study: study.name,
        request_id: "",
        topics: [{ query_id: "q1", text: "a topic" }],
      }),
      (error) => {
        assert.equal(error.code, grpc.status.INVALID_ARGUMENT, error.details);
        assert.deepEqual(
          fieldViolations(error).map((violation) => violation.field),
          ["request_id"],
        );
        return true;
      },
    );
    const after = await unary(client, "GetStudy", { name: study.name });
    assert.equal(after.inputs.chunks, 0, "nothing was added");
  } finally {
    client.close();
  }
});

test("a provider_batch study with a judge that has no batch API is refused, naming it", async () => {
  const client = new StudyService(address, credentials());
  try {
    await assert.rejects(
      unary(client, "CreateStudy", {
        spec: { ranking: { judges: [ORACLE] }, provider_batch: true },
        request_id: `node-study-batch-${process.pid}-${Date.now()}`,
      }),
      (error) => {
        assert.equal(error.code, grpc.status.INVALID_ARGUMENT, error.details);
        assert.deepEqual(
          fieldViolations(error).map((violation) => violation.field),
          ["spec.ranking.judges[0].provider"],
        );
        return true;
      },
    );
  } finally {
    client.close();
  }
});

test("a Node client adds a system to an ended study and only its holes are judged", async () => {
  const client = new StudyService(address, credentials());
  try {
    const queries = collection(20);
    const requestId = `node-study-add-${process.pid}-${Date.now()}`;
    const study = await unary(client, "CreateStudy", {
      spec: { depth: DEPTH, ranking: { judges: [ORACLE], top_k: 3 }, labels: LABELS },
      request_id: requestId,
    });
    const passagesOf = (query, docs) =>
      docs.map((doc_id) => ({
        doc_id,
        text: `passage ${doc_id}`,
        metadata: { score: String(query.grades.get(doc_id)) },
      }));
    const firstTwo = ["good", "fair"];
    await addInputs(client, {
      study: study.name,
      request_id: `${requestId}-first`,
      topics: queries.map((query) => ({ query_id: query.query_id, text: query.text })),
      runs: firstTwo.map((system) => ({
        system,
        entries: queries.flatMap((q) => q.runs.find((run) => run.system === system).entries),
      })),
      passages: queries.flatMap((query) => passagesOf(query, [...query.grades.keys()])),
    });
    await unary(client, "StartStudy", { name: study.name }, 60_000);
    const first = (await watch(client, study.name)).at(-1).study;
    assert.equal(first.state, "STUDY_STATE_SUCCEEDED");

    const poor = queries.flatMap((q) => q.runs.find((run) => run.system === "poor").entries);
    const added = await addInputs(client, {
      study: study.name,
      request_id: `${requestId}-poor`,
      runs: [{ system: "poor", entries: poor }],
    });
    assert.equal(added.added, true);
    const extended = await unary(
      client,
      "ExtendStudy",
      { name: study.name, request_id: `${requestId}-round-1`, systems: ["poor"] },
      60_000,
    );
    assert.equal(extended.state, "STUDY_STATE_RUNNING");
    const final = (await watch(client, study.name)).at(-1).study;
    assert.equal(final.state, "STUDY_STATE_SUCCEEDED");
    const round = final.inputs.rounds[1];
    assert.deepEqual(round.systems, ["poor"]);
    // The holes, from the runs here: poor's top DEPTH less the first two systems' pools.
    const top = (entries) =>
      [...entries]
        .sort((a, b) => b.score - a.score || (a.doc_id < b.doc_id ? 1 : -1))
        .slice(0, DEPTH)
        .map((entry) => entry.doc_id);
    let holes = 0;
    for (const query of queries) {
      const before = new Set(
        firstTwo.flatMap((system) => top(query.runs.find((run) => run.system === system).entries)),
      );
      holes += top(query.runs.find((run) => run.system === "poor").entries).filter(
        (doc) => !before.has(doc),
      ).length;
    }
    assert.equal(Number(round.documents_added), holes);
    assert.ok(Number(final.progress.judge_calls) > Number(first.progress.judge_calls));

    const report = await unary(client, "GetStudyReport", { name: study.name }, 60_000);
    assert.deepEqual([...report.ranking].sort(), ["fair", "good", "poor"]);
    const judged = report.judged.find((entry) => entry.system === "poor");
    assert.equal(judged.round, 1);
    assert.ok(judged.before < judged.after, JSON.stringify(judged));

    // The same request_id again is the round it started; with no run added, a new one is not.
    const again = await unary(client, "ExtendStudy", {
      name: study.name,
      request_id: `${requestId}-round-1`,
    });
    assert.equal(again.inputs.rounds.length, 2);
    await assert.rejects(unary(client, "ExtendStudy", { name: study.name }), (error) => {
      assert.equal(error.code, grpc.status.FAILED_PRECONDITION, error.details);
      return true;
    });
  } finally {
    client.close();
  }
});

test("a Node client labels with a grader, then calibrates with a human sample", async () => {
  const client = new StudyService(address, credentials());
  try {
    const queries = collection(12);
    const requestId = `node-study-sample-${process.pid}-${Date.now()}`;
    // No labels asked for: the oracle can grade, so the server labels pointwise with it.
    const study = await unary(client, "CreateStudy", {
      spec: { depth: DEPTH, ranking: { judges: [ORACLE], top_k: 3 } },
      request_id: requestId,
    });
    assert.equal(study.spec.labels.pointwise.judge.provider, "oracle");
    for (const chunk of chunks(queries, requestId)) {
      await addInputs(client, { study: study.name, ...chunk });
    }
    await unary(client, "StartStudy", { name: study.name }, 60_000);
    const ended = (await watch(client, study.name)).at(-1).study;
    assert.equal(ended.state, "STUDY_STATE_SUCCEEDED");
    assert.ok(Number(ended.progress.pointwise_calls) > 0);

    // A grade outside 0-3 is refused, naming it; nothing is added.
    const [first] = queries;
    const bad = {
      study: study.name,
      request_id: `${requestId}-bad`,
      human_sample: [{ query_id: first.query_id, doc_id: [...first.pool][0], grade: 7 }],
    };
    await assert.rejects(unary(client, "AddStudyInputs", bad), (error) => {
      assert.equal(error.code, grpc.status.INVALID_ARGUMENT, error.details);
      assert.deepEqual(
        fieldViolations(error).map((violation) => violation.field),
        ["human_sample[0].grade"],
      );
      return true;
    });

    // A person's grades of three queries' pools, sent to the ended study and applied.
    const sampled = queries.slice(0, 3);
    await addInputs(client, {
      study: study.name,
      request_id: `${requestId}-sample`,
      human_sample: sampled.flatMap((query) =>
        [...query.pool].map((doc_id) => ({
          query_id: query.query_id,
          doc_id,
          grade: query.grades.get(doc_id),
        })),
      ),
    });
    const calibrated = await unary(client, "CalibrateStudy", { name: study.name }, 60_000);
    assert.equal(calibrated.progress.judge_calls, ended.progress.judge_calls, "nothing judged again");
    const report = await unary(client, "GetStudyReport", { name: study.name }, 60_000);
    assert.equal(report.interval_method, "ppi");
    assert.equal(report.sample.queries, 3);
    assert.equal(report.pairs.length, 3);
    const qrels = (await pages(client, "ExportStudyQrels", study.name, 1000))
      .map((page) => page.qrels)
      .join("");
    for (const query of sampled) {
      for (const doc of query.pool) {
        assert.ok(qrels.includes(`${query.query_id} 0 ${doc} ${query.grades.get(doc)}\n`), doc);
      }
    }
  } finally {
    client.close();
  }
});
