"""One reader for every command (issue 34, items 12 to 14): a run, topics or passages file
means the same thing to `rank`, `study`, `eval`, `agree`, `fill` and `qualify`, is refused by
each of them in the same words (file and line), passages keep their metadata wherever they are
read, and the API's limits are named by the query or document, the file and the line."""

from __future__ import annotations

import codecs
import json
from pathlib import Path

import pytest
from cli_process import tierank
from test_cli_fill import fill_args, write_inputs
from test_cli_study import write_collection

from tierank.client import Client

EXIT_USAGE = 2
QUERY = "honeybees"


def passages_with_scores(path: Path, scores: dict[str, int]) -> Path:
    """JSONL passages whose hidden grade the oracle reads (metadata.score), with a byte order
    mark and CRLF line ends."""
    lines = [
        json.dumps({"docid": doc, "contents": f"text of {doc}", "metadata": {"score": score}})
        for doc, score in scores.items()
    ]
    path.write_bytes(codecs.BOM_UTF8 + "\r\n".join(lines).encode() + b"\r\n")
    return path


def test_rank_from_a_run_keeps_the_passages_metadata(tierank_server: str, tmp_path: Path) -> None:
    # The oracle judges by metadata.score; before, `rank --run` dropped every passage's
    # metadata and the oracle failed on each candidate.
    scores = {"a": 0, "b": 3, "c": 1, "d": 2}
    passages = passages_with_scores(tmp_path / "passages.jsonl", scores)
    run = tmp_path / "run.trec"
    run.write_text("".join(f"q1 Q0 {doc} {i} {10 - i} bm25\n" for i, doc in enumerate(scores, 1)))
    result = tierank(
        "rank", "--run", str(run), "--passages", str(passages), "--qid", "q1", "--query", QUERY,
        "--judge", "oracle?noise=0", "--format", "trec", "--server", tierank_server,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert [line.split()[2] for line in result.stdout.splitlines()] == ["b", "d", "c", "a"]


def test_rank_orders_a_run_by_score_as_every_command_does(
    tierank_server: str, tmp_path: Path
) -> None:
    # The rank column disagrees with the scores: trec_eval (and `study`, `eval`) go by score.
    # A seventh column is ignored, as trec_eval ignores it.
    run = tmp_path / "run.trec"
    run.write_bytes(
        codecs.BOM_UTF8
        + b"q1 Q0 a 1 1.0 bm25 extra\r\nq1 Q0 b 2 3.0 bm25 extra\r\nq1 Q0 c 3 2.0 bm25 extra\r\n"
    )
    passages = tmp_path / "passages.tsv"
    passages.write_text("a\talpha bees\nb\tbeta bees\nc\tgamma bees\n")
    result = tierank(
        "rank", "--run", str(run), "--passages", str(passages), "--qid", "q1", "--query", QUERY,
        "--format", "json", "--server", tierank_server,
    )  # fmt: skip
    assert result.returncode in (0, 4), result.stderr
    with Client(tierank_server) as client:
        job = client.get_job(json.loads(result.stdout)["job"], full=True)
    assert [c.id for c in job.spec.candidates] == ["b", "c", "a"]
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q1 0 b 3\nq1 0 c 1\n")
    scored = tierank("eval", str(run), "--qrels", str(qrels), "--server", tierank_server)
    assert scored.returncode == 0, scored.stderr


@pytest.mark.parametrize(
    ("second_line", "problem"),
    [
        ("q1 Q0 b 2 NaN bm25", "score 'NaN' is not finite"),
        ("q1 Q0 a 2 0.5 bm25", "document 'a' listed twice for query 'q1'"),
        ("q1 Q0 b 2 0.5", "expected 6 fields 'qid Q0 docid rank score tag', got 5"),
        (f"q1 Q0 {'x' * 200} 2 0.5 bm25", f"document id '{'x' * 59}…' is 200 bytes, over the"),
    ],
)
def test_a_bad_run_is_refused_by_every_command_in_the_same_words(
    tmp_path: Path, second_line: str, problem: str
) -> None:
    run = tmp_path / "run.trec"
    run.write_bytes(f"q1 Q0 a 1 1.0 bm25\r\n{second_line}\r\n".encode())
    paths = write_collection(tmp_path, queries=1, docs=3)
    inputs = ("--topics", str(paths["topics"]), "--passages", str(paths["passages"]))
    commands = [
        ("rank", "--run", str(run), "--passages", str(paths["passages"]), "--qid", "q1",
         "--query", QUERY),
        ("study", "run", *inputs, "--run", f"bm25={run}"),
        ("study", "add-run", "studies/x", f"bm25={run}"),
        ("eval", str(run), "--qrels", str(paths["qrels"])),
        ("agree", str(run), "--qrels", str(paths["qrels"]), "--qrels", str(paths["qrels"])),
        ("fill", *inputs, "--qrels", str(paths["qrels"]), "--run", str(run), "--judge", "oracle"),
        ("qualify", *inputs, "--qrels", str(paths["qrels"]), "--run", str(run), "--judge",
         "oracle"),
    ]  # fmt: skip
    for command in commands:
        # Refused as the file is read, before any server is started or reached.
        result = tierank(*command, "--db", str(tmp_path / "never.db"))
        assert result.returncode == EXIT_USAGE, (command, result.stderr)
        assert result.stderr.startswith(f"tierank {command[0]}: {run}:2: {problem}"), (
            command,
            result.stderr,
        )
    assert not (tmp_path / "never.db").exists()


def test_limits_name_the_passage_or_query_the_file_and_the_line(tmp_path: Path) -> None:
    paths = write_collection(tmp_path, queries=2, docs=4)
    # A passage of 12 MB, the pool's, on the third line of the collection.
    lines = paths["passages"].read_text().splitlines()
    record = json.loads(lines[2])
    record["contents"] = "bees " * 2_400_000
    lines[2] = json.dumps(record)
    huge = tmp_path / "huge-passage.jsonl"
    huge.write_text("\n".join(lines) + "\n")
    passage_problem = (
        f"{huge}:3: the text of passage {record['docid']!r} is 12,000,000 bytes, over the limit"
        " of 65,536 (tierank/limits.py)"
    )
    # A query of 20 KB on the second line of the topics (which have a BOM and CRLF).
    topics = paths["topics"].read_bytes().split(b"\r\n")
    qid = topics[1].split(b"\t")[0].decode()
    topics[1] = topics[1].split(b"\t")[0] + b"\t" + b"bees" * 5000
    long_query = tmp_path / "long-query.tsv"
    long_query.write_bytes(b"\r\n".join(topics))
    query_problem = (
        f"{long_query}:2: the text of query {qid!r} is 20,000 bytes, over the limit of 8,192"
        " (tierank/limits.py)"
    )
    # A NUL in a passage's metadata (a JSON escape: the file itself is text).
    nul = tmp_path / "nul-metadata.jsonl"
    nul.write_text(
        json.dumps({"docid": "q1d0", "contents": "text", "metadata": {"source": "a\u0000b"}}) + "\n"
    )
    # A human grade off the scale of human qrels, on the fourth line.
    qrels = paths["qrels"].read_text().splitlines()
    qid, _, docid, _ = qrels[3].split()
    qrels[3] = f"{qid} 0 {docid} 99"
    off_scale = tmp_path / "off-scale.qrels"
    off_scale.write_text("\n".join(qrels) + "\n")
    runs = [arg for name in ("good", "fair") for arg in ("--run", f"{name}={paths[name]}")]
    db = str(tmp_path / "t.db")
    cases = [
        (("rank", "--run", str(paths["good"]), "--passages", str(nul), "--qid", "q1", "--query",
          QUERY), f"{nul}:1: the metadata of passage 'q1d0' holds a NUL character"),
        (("study", "run", "--topics", str(paths["topics"]), "--passages",
          str(paths["passages"]), *runs, "--human-qrels", str(off_scale)),
         f"{off_scale}:4: grade 99 of {qid} {docid} is outside -2 to 10, the grades human"
         " qrels may hold"),
        (("study", "run", "--topics", str(paths["topics"]), "--passages", str(huge), *runs),
         passage_problem),
        (("study", "run", "--topics", str(long_query), "--passages", str(paths["passages"]),
          *runs), query_problem),
        (("rank", "--run", str(paths["good"]), "--passages", str(huge), "--qid",
          record["docid"].split("d")[0], "--query", QUERY), passage_problem),
        (("rank", "--run", str(paths["good"]), "--passages", str(paths["passages"]),
          "--topics", str(long_query), "--qid", qid), query_problem),
    ]  # fmt: skip
    for command, problem in cases:
        result = tierank(*command, "--db", db)
        assert result.returncode == EXIT_USAGE, (command, result.stderr)
        assert result.stderr == f"tierank {command[0]}: {problem}\n", command


def test_fill_takes_jsonl_topics_and_tsv_passages_as_study_does(
    tierank_server: str, tmp_path: Path
) -> None:
    # Topics as JSONL (with a BOM and CRLF) were refused by `fill` and `qualify`, which sent
    # the file to the server as it was; the one reader takes them for every command.
    paths = write_inputs(tmp_path)
    topics = [json.dumps({"query_id": q, "query": f"question {q}"}) for q in ("q1", "q2")]
    paths["topics"].write_bytes(codecs.BOM_UTF8 + "\r\n".join(topics).encode() + b"\r\n")
    result = tierank(*fill_args(paths, "--server", tierank_server))
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 18  # 12 judged pairs and 6 holes filled
