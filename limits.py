"""The API's bounds and defaults, declared once: what a request may hold and what an unset
field means. The server's validation and defaults, the command line's help texts and the docs
(README.md, docs/*.md, the .proto comments; tests/test_limits.py holds them to these
values) all read them here. A root module, not a server one, because the client may not import
the server."""

from __future__ import annotations

# --- A job (rank.proto JobSpec) -------------------------------------------------------------
MIN_CANDIDATES = 2
MAX_CANDIDATES = 10_000
# Candidates per judge call (k), JobSpec.batch_size and QualifyJudgeRequest.batch_size.
DEFAULT_BATCH_SIZE = 10
MIN_BATCH_SIZE = 2
MAX_BATCH_SIZE = 20
# Judge calls in flight for one job (JobSpec.max_in_flight). A job's calls are sequential
# rounds on its critical path, so it gets a little more room than a labelling operation.
DEFAULT_JOB_MAX_IN_FLIGHT = 10
# Judge calls in flight for one grading, filling or qualification operation (max_in_flight of
# GradePairs, FillQrels, QualifyJudge): independent calls, each a paid one, started at once.
DEFAULT_OPERATION_MAX_IN_FLIGHT = 8
# For jobs and operations alike.
MAX_IN_FLIGHT = 64
# Judges in the first quorum of an adaptive ensemble (never more than the job's judges).
DEFAULT_QUORUM = 2
MAX_JUDGES = 32
MIN_WEIGHT = 1e-3
MAX_WEIGHT = 1e3
MIN_TEMPERATURE = 0.0
MAX_TEMPERATURE = 2.0
# Lengths in UTF-8 bytes. They bound what a job can grow to (ids are repeated in every tiers
# event and in the job's tiers), so that every response about a valid job fits in gRPC's default
# 4 MiB receive limit in the BASIC view, whatever its size.
MAX_ID_BYTES = 128
MAX_QUERY_BYTES = 8 * 1024
MAX_RUBRIC_BYTES = 16 * 1024
MAX_REQUEST_ID_BYTES = 128
MAX_JUDGE_NAME_BYTES = 128
MAX_MODEL_BYTES = 256
MAX_JUDGE_OPTIONS = 16
MAX_OPTION_KEY_BYTES = 64
MAX_OPTION_VALUE_BYTES = 256
# Wall-clock deadlines in seconds (deadline_seconds of JobSpec, StudySpec and
# ExtendStudyRequest; 0 means none). A deadline further off is a mistake rather than a plan
# (1e308 was taken): a study in provider batch mode waits up to a day for each of a few rounds.
MAX_DEADLINE_SECONDS = 30 * 24 * 3600
# Watch streams open on one job at once. Each watcher holds a stream, its catch-up page and a
# flow-control window of memory; past this, one client's watchers would grow the server without
# bound.
MAX_WATCHERS_PER_JOB = 200

# --- Listing (page_size of ListJobs, ListOperations, ListQualifications) ---------------------
DEFAULT_PAGE_SIZE = 50
# A ListJobs page is cut further to stay within the response size limit.
MAX_JOBS_PAGE_SIZE = 1000
MAX_OPERATIONS_PAGE_SIZE = 500
MAX_QUALIFICATIONS_PAGE_SIZE = 500

# --- Evaluation (eval.proto) ----------------------------------------------------------------
DEFAULT_MEASURE = "nDCG@10"
# Relevant when grade >= this: binary figures, kappa, precision/recall (TREC DL's convention),
# on the 0..3 scale.
DEFAULT_RELEVANCE_THRESHOLD = 2
MIN_RELEVANCE_THRESHOLD = 1
MAX_RELEVANCE_THRESHOLD = 3
DEFAULT_RBO_PERSISTENCE = 0.9
# A measure's cutoff @K (every measure string: EvaluateRequest, StudySpec.measures, the command
# line). Runs are 1,000 deep by TREC's convention and a job ranks at most MAX_CANDIDATES; a
# cutoff past this is a typo (nDCG@99999999999 was taken), not a deeper evaluation.
MAX_MEASURE_CUTOFF = 10_000
# FillQrels: the top this many documents of each run per query are graded if unjudged.
DEFAULT_FILL_DEPTH = 10
MAX_HELD_IN_SAMPLE = 10_000
# Pairs in one GradePairs request, and pairs graded by one FillQrels.
MAX_PAIRS = 100_000
# QualifyJudge: shuffles of each batch, queries used, batches per query.
DEFAULT_SHUFFLES = 2
MIN_SHUFFLES = 2
MAX_SHUFFLES = 8
DEFAULT_QUALIFY_QUERIES = 30
MAX_QUALIFY_QUERIES = 200
DEFAULT_BATCHES_PER_QUERY = 2
MAX_BATCHES_PER_QUERY = 10
# Heavy EvalService requests (grading pairs, scoring runs) one tenant may run at once on one
# server. Each is already bounded and steps aside for others on the event loop; more of them
# at once would only multiply one tenant's share of the server.
MAX_EVAL_REQUESTS_PER_TENANT = 2

# --- Studies (study.proto) -------------------------------------------------------------------
# Pool depth d: each system's top-d documents per query are judged.
DEFAULT_STUDY_DEPTH = 20
MAX_STUDY_DEPTH = 1000
# Queries judged at once by one study: each is a live tournament in memory.
DEFAULT_LIVE_QUERIES = 8
MAX_LIVE_QUERIES = 256
# ... of a provider_batch study: the next calls of every live query share one provider batch
# per wave, so the more queries live, the fewer batches (hours each, at worst) one after another.
DEFAULT_BATCH_LIVE_QUERIES = MAX_LIVE_QUERIES
# What a study may hold. The queries bound a study's pools and report; the systems its tables.
MAX_STUDY_QUERIES = 100_000
MAX_STUDY_SYSTEMS = 64
MAX_PASSAGE_BYTES = 64 * 1024
DEFAULT_STUDY_MEASURES = ("nDCG@10", "RR(rel=2)@10", "P@10", "AP", "Judged@10", "RA-nWG@10")
MAX_STUDY_MEASURES = 16
# Pointwise labels: probes per pooled document (each query at least MIN_PROBES, or its whole
# pool when smaller), and the share of a query's budget they may reserve at most.
DEFAULT_PROBE_RATE = 0.25
MIN_PROBES = 2
MAX_PROBE_SHARE = 0.5
# The grades pointwise graders answer, a study's labels take and a human sample gives: the
# TREC DL scale.
MIN_GRADE = 0
MAX_GRADE = 3
# Grades human qrels may hold (for agreement): TREC's -2 for junk up to a 10-point scale.
MIN_HUMAN_GRADE = -2
MAX_HUMAN_GRADE = 10
# Study queries per ListStudyQueries page, and queries per ExportStudyQrels page.
DEFAULT_STUDY_QUERIES_PAGE_SIZE = 100
MAX_STUDY_QUERIES_PAGE_SIZE = 1000
DEFAULT_QRELS_PAGE_QUERIES = 1000
MAX_QRELS_PAGE_QUERIES = 10_000
MAX_STUDIES_PAGE_SIZE = 500

# --- Administration (admin.proto) -----------------------------------------------------------
MAX_DISPLAY_NAME_BYTES = 128
MAX_SUBJECT_BYTES = 1024
MAX_PROVIDER_KEY_BYTES = 4096
