"""Every input file is read the same way by every command (issue 22, items 17 and 18): a UTF-8
byte order mark and CRLF line ends change nothing, an empty or undecodable file is refused in
one line naming it, and `--rubric @FILE` is the file's text wherever a rubric is taken."""

from __future__ import annotations

import codecs
import json
import os
import sys
from pathlib import Path

import anyio
import pytest
from cli_process import POOL, QUERY, job_name_in, tierank
from shared_data import TREC_DL

from tierank.client import Client
from tierank.server.app import background_server
from tierank.server.settings import ServerSettings

DL = TREC_DL
pytestmark = pytest.mark.usefixtures("shared_data")
DL_QRELS = DL / "qrels.dl19-passage.txt"
DL_TOPICS = DL / "topics.dl19-passage.txt"
DL_PASSAGES = DL / "passages" / "dl19-rankllm-union-passages.jsonl"
BM25_RUN = DL / "runs" / "run.rankllm.BM25.dl19.top100.trec"
EXIT_USAGE = 2


def as_windows_would(source: Path, target: Path, *, lines: int | None = None) -> Path:
    """`source` saved by a Windows editor: a byte order mark first and CRLF line ends."""
    text = source.read_text(encoding="utf-8")
    kept = text.split("\n")[:lines] if lines else text.split("\n")
    target.write_bytes(codecs.BOM_UTF8 + "\r\n".join(kept).encode("utf-8"))
    return target


def first_qid_of(run: Path) -> str:
    return run.read_text(encoding="utf-8").split(maxsplit=1)[0]


def test_eval_scores_a_bom_and_crlf_run_and_qrels_as_the_plain_ones(
    tierank_server: str, tmp_path: Path
) -> None:
    run = as_windows_would(BM25_RUN, tmp_path / "bm25.trec")
    qrels = as_windows_would(DL_QRELS, tmp_path / "qrels.txt")
    plain = tierank(
        "eval", str(BM25_RUN), "--qrels", str(DL_QRELS), "--json", "--server", tierank_server
    )
    edited = tierank("eval", str(run), "--qrels", str(qrels), "--json", "--server", tierank_server)
    assert plain.returncode == 0 and edited.returncode == 0, edited.stderr
    measures = [json.loads(r.stdout)["runs"][0]["measures"] for r in (plain, edited)]
    assert measures[0] == measures[1]
    assert measures[1]["nDCG@10"]["mean"] > 0.5


def test_rank_from_a_bom_run_keeps_the_first_querys_top_document(
    tierank_server: str, tmp_path: Path
) -> None:
    run = as_windows_would(BM25_RUN, tmp_path / "bm25.trec", lines=20)
    passages = as_windows_would(DL_PASSAGES, tmp_path / "passages.jsonl")
    topics = as_windows_would(DL_TOPICS, tmp_path / "topics.tsv")
    qid = first_qid_of(BM25_RUN)
    result = tierank(
        "rank", "--run", str(run), "--passages", str(passages), "--topics", str(topics),
        "--qid", qid, "--format", "trec", "--server", tierank_server,
    )  # fmt: skip
    assert result.returncode in (0, 4), result.stderr
    ranked = {line.split()[2] for line in result.stdout.splitlines()}
    expected = {line.split()[2] for line in BM25_RUN.read_text().splitlines()[:20]}
    assert ranked == expected
    assert all(line.split()[0] == qid for line in result.stdout.splitlines())


def test_a_50k_line_crlf_passage_file_with_a_bom(tierank_server: str, tmp_path: Path) -> None:
    passages = tmp_path / "passages.tsv"
    rows = [f"doc{i}\tpassage {i} about honeybees and the waggle dance" for i in range(50_000)]
    passages.write_bytes(codecs.BOM_UTF8 + "\r\n".join(rows).encode())
    run = tmp_path / "run.trec"
    picked = [0, 7, 49_999]
    run.write_text("".join(f"q1 Q0 doc{i} {r} {9 - r} sys\n" for r, i in enumerate(picked, 1)))
    result = tierank(
        "rank", "--run", str(run), "--passages", str(passages), "--qid", "q1",
        "--query", QUERY, "--format", "json", "--server", tierank_server,
    )  # fmt: skip
    assert result.returncode in (0, 4), result.stderr
    tiers = json.loads(result.stdout)["tiers"]
    candidates = {c for tier in tiers for c in tier["candidate_ids"]}
    assert candidates == {f"doc{i}" for i in picked}


def test_a_bom_jsonl_pool_and_rubric_file(tierank_server: str, tmp_path: Path) -> None:
    pool = as_windows_would(Path(POOL), tmp_path / "pool.jsonl")
    rubric = tmp_path / "rubric.txt"
    rubric.write_bytes(codecs.BOM_UTF8 + b"Relevant: explains the dance.\r\n")
    result = tierank(
        "rank", str(pool), "--query", QUERY, "--rubric", f"@{rubric}", "--top-k", "3",
        "--format", "json", "--server", tierank_server,
    )  # fmt: skip
    assert result.returncode in (0, 4), result.stderr
    with Client(tierank_server) as client:
        job = client.get_job(job_name_in(result.stderr))
    assert job.spec.rubric == "Relevant: explains the dance."


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "the file is empty"),
        (codecs.BOM_UTF8 + b"\r\n  \r\n", "the file is empty"),
        (b"1 Q0 \xff\xfe 3 0.5 t\n", ":1: not UTF-8 text"),
    ],
)
def test_empty_and_undecodable_files_are_refused_in_one_line(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_bytes(content)
    commands = [
        ("eval", str(bad), "--qrels", str(DL_QRELS)),
        ("eval", str(BM25_RUN), "--qrels", str(bad)),
        ("rank", str(bad), "--query", QUERY),
        ("rank", POOL, "--query", QUERY, "--rubric", f"@{bad}"),
        ("rank", "--run", str(bad), "--passages", str(DL_PASSAGES), "--qid", "1", "--query", "q"),
        ("agree", str(BM25_RUN), "--qrels", str(bad), "--qrels", str(DL_QRELS)),
    ]
    where = f"{bad}{problem}" if problem.startswith(":") else f"{bad}: {problem}"
    for command in commands:
        # Refused before any server is started or reached: no --server is needed.
        result = tierank(*command)
        assert result.returncode == EXIT_USAGE, (command, result.stderr)
        flag = "--rubric: " if "--rubric" in command else ""
        assert result.stderr == f"tierank {command[0]}: {flag}{where}\n", command


def test_an_undecodable_line_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.trec"
    bad.write_bytes(b"1 Q0 a 1 2.0 t\r\n1 Q0 b 2 1.0 t\r\n1 Q0 \xff\xfe 3 0.5 t\r\n")
    for command in (
        ("eval", str(bad), "--qrels", str(DL_QRELS)),
        ("rank", "--run", str(bad), "--passages", str(DL_PASSAGES), "--qid", "1", "--query", QUERY),
    ):
        result = tierank(*command)
        assert result.returncode == EXIT_USAGE
        assert result.stderr == f"tierank {command[0]}: {bad}:3: not UTF-8 text\n"


@pytest.mark.parametrize("command", ["rank", "qualify", "fill"])
def test_a_rubric_file_that_is_not_there_is_a_usage_error(command: str, tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent.txt"
    args = {
        "rank": ("rank", POOL, "--query", QUERY),
        "qualify": (
            "qualify", "--judge", "lexical", "--qrels", str(DL_QRELS),
            "--topics", str(DL_TOPICS), "--passages", str(DL_PASSAGES),
        ),
        "fill": (
            "fill", "--run", str(BM25_RUN), "--qrels", str(DL_QRELS), "--topics", str(DL_TOPICS),
            "--passages", str(DL_PASSAGES), "--judge", "oracle",
        ),
    }[command]  # fmt: skip
    result = tierank(*args, "--rubric", f"@{missing}")
    assert result.returncode == EXIT_USAGE
    assert result.stderr == (
        f"tierank {command}: --rubric: cannot read {missing}: No such file or directory\n"
    )


async def test_qualify_and_fill_send_the_rubric_files_text_to_the_judge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sys.path.insert(0, str(Path(__file__).parents[1] / "providers"))
    from fakes import Answer, FakeLLMServer

    for name in [n for n in os.environ if n.startswith("TIERANK_OPENAI_COMPATIBLE")]:
        monkeypatch.delenv(name)
    rubric = tmp_path / "rubric.txt"
    rubric.write_bytes(codecs.BOM_UTF8 + b"Relevant: names the year.\r\n")
    qid = first_qid_of(BM25_RUN)
    run = tmp_path / "run.trec"
    run.write_text("\n".join(BM25_RUN.read_text().splitlines()[:3]) + "\n")
    async with FakeLLMServer() as fake:
        fake.respond_with("openai-compatible", lambda request: Answer("[1] > [2]"))
        config = tmp_path / "judges.json"
        provider = {"base_url": fake.base_url("openai-compatible"), "api_key": "k"}
        config.write_text(json.dumps({"providers": {"openai-compatible": provider}}))
        settings = ServerSettings(listen="127.0.0.1:0", db=tmp_path / "t.db", judges_config=config)
        async with background_server(settings) as address:
            common = (
                "--judge", "openai-compatible:m", "--qrels", str(DL_QRELS), "--topics",
                str(DL_TOPICS), "--passages", str(DL_PASSAGES), "--rubric", f"@{rubric}",
                "--server", address,
            )  # fmt: skip
            await anyio.to_thread.run_sync(
                lambda: tierank("qualify", *common, "--queries", "1", "--batches", "1",
                                "--shuffles", "2", "--k", "2", "--run", str(run))
            )  # fmt: skip
            listwise_prompts = [r.prompt for r in fake.requests("openai-compatible")]
            await anyio.to_thread.run_sync(
                lambda: tierank("fill", *common, "--run", str(run), "--depth", "3")
            )
            pointwise_prompts = [r.prompt for r in fake.requests("openai-compatible")]
    del pointwise_prompts[: len(listwise_prompts)]
    assert qid and listwise_prompts and pointwise_prompts
    for prompt in listwise_prompts + pointwise_prompts:
        assert "Relevant: names the year." in prompt
        assert str(rubric) not in prompt
