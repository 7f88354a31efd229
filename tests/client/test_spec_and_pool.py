"""Spec builders and input readers: pure functions, no server."""

from __future__ import annotations

from pathlib import Path

import pytest
from shared_data import TREC_DL

from tierank.client import candidate_from_dict, job_spec, judge
from tierank.client._inputs import InputError
from tierank.client._pool import read_jsonl_pool, read_run_pool, read_topic
from tierank.v1 import rank_pb2


def test_judge_strings() -> None:
    assert (judge("lexical").provider, judge("lexical").model) == ("lexical", "")
    compatible = judge("openai-compatible:llama3:8b", weight=2, options={"base_url": "u"})
    assert (compatible.provider, compatible.model, compatible.weight) == (
        "openai-compatible",
        "llama3:8b",
        2,
    )
    assert dict(compatible.parameters.options) == {"base_url": "u"}
    assert not compatible.parameters.HasField("temperature")
    assert judge("openai:gpt-4.1", temperature=0.0).parameters.HasField("temperature")
    with pytest.raises(ValueError, match="provider"):
        judge(":model")


def test_candidates_accept_both_key_styles_and_stringify_metadata() -> None:
    ours = candidate_from_dict({"id": 7, "text": "t", "metadata": {"score": 3}})
    pyserini = candidate_from_dict({"docid": "d", "contents": "c"})
    assert (ours.id, ours.text, dict(ours.metadata)) == ("7", "t", {"score": "3"})
    assert (pyserini.id, pyserini.text) == ("d", "c")
    with pytest.raises(ValueError, match="needs one of"):
        candidate_from_dict({"id": "x"})


def test_job_spec_leaves_unset_optionals_to_the_server() -> None:
    spec = job_spec("q", [{"id": "a", "text": "x"}], judges=["lexical", "oracle:sim"])
    assert not spec.HasField("batch_size")
    assert not spec.HasField("max_in_flight")
    assert spec.ensemble_mode == rank_pb2.ENSEMBLE_MODE_ALL
    assert [j.provider for j in spec.judges] == ["lexical", "oracle"]

    tuned = job_spec("q", [], batch_size=5, ensemble="adaptive", quorum=2, max_cost_usd=1.5)
    assert (tuned.batch_size, tuned.quorum, tuned.budget.max_cost_usd) == (5, 2, 1.5)
    assert tuned.ensemble_mode == rank_pb2.ENSEMBLE_MODE_ADAPTIVE
    with pytest.raises(ValueError, match="ensemble"):
        job_spec("q", [], ensemble="some")


def test_samples_per_judge_lists_every_judge_under_numbered_names() -> None:
    judges = ["oracle:sim", judge("lexical", weight=2), judge("oracle", name="noisy")]
    spec = job_spec("q", [], judges=judges, samples_per_judge=2)
    assert [(j.provider, j.name, j.weight) for j in spec.judges] == [
        ("oracle", "oracle/sim#1", 0),
        ("oracle", "oracle/sim#2", 0),
        ("lexical", "lexical#1", 2),
        ("lexical", "lexical#2", 2),
        ("oracle", "noisy#1", 0),
        ("oracle", "noisy#2", 0),
    ]
    assert all(j.model == "sim" for j in spec.judges[:2])
    assert [j.name for j in job_spec("q", [], judges=judges).judges] == ["", "", "noisy"]
    with pytest.raises(ValueError, match="at least 1"):
        job_spec("q", [], samples_per_judge=0)


def test_jsonl_pool_reports_the_bad_line(tmp_path: Path) -> None:
    pool = tmp_path / "pool.jsonl"
    pool.write_text('{"id": "a", "text": "x"}\n\n{"id": "b"}\n')
    with pytest.raises(InputError, match=r"pool.jsonl:3: missing field 'text' or 'contents'"):
        read_jsonl_pool(pool)
    pool.write_text('{"id": "a", "text": "x"}\n{not json\n')
    with pytest.raises(InputError, match=r"pool.jsonl:2: invalid JSON"):
        read_jsonl_pool(pool)
    pool.write_text('{"id": "a", "text": "x"}\nnot json\n')
    with pytest.raises(InputError, match=r"pool.jsonl:2: expected 'docid<TAB>text' or a JSON"):
        read_jsonl_pool(pool)


def test_run_pool_with_tsv_passages_keeps_run_order(tmp_path: Path) -> None:
    run = tmp_path / "run.trec"
    run.write_text("1 Q0 b 2 9.0 x\n2 Q0 z 1 9.9 x\n1 Q0 a 1 9.5 x\n1 Q0 c 10 1.0 x\n")
    passages = tmp_path / "collection.tsv"
    passages.write_text("a\talpha\nb\tbeta\nc\tgamma\nz\tzeta\n")
    assert [(c.id, c.text) for c in read_run_pool(run, passages, "1")] == [
        ("a", "alpha"),
        ("b", "beta"),
        ("c", "gamma"),
    ]
    with pytest.raises(InputError, match="no lines for query '3'"):
        read_run_pool(run, passages, "3")
    passages.write_text("a\talpha\n")
    with pytest.raises(InputError, match="no text for 2 docids"):
        read_run_pool(run, passages, "1")


def test_topics_in_tsv_and_jsonl(tmp_path: Path) -> None:
    tsv = tmp_path / "topics.tsv"
    tsv.write_text("1\tfirst query\n2\tsecond query\n")
    jsonl = tmp_path / "topics.jsonl"
    jsonl.write_text('{"query_id": 2, "text": "second query"}\n')
    assert read_topic(tsv, "2") == "second query"
    assert read_topic(jsonl, "2") == "second query"
    with pytest.raises(InputError, match="no topic"):
        read_topic(tsv, "9")


@pytest.mark.usefixtures("shared_data")
def test_real_dl19_run_with_pyserini_passages() -> None:
    pool = read_run_pool(
        TREC_DL / "runs" / "run.rankllm.BM25.dl19.top100.trec",
        TREC_DL / "passages" / "dl19-rankllm-union-passages.jsonl",
        "1037798",
    )
    assert len(pool) == 100
    assert len({c.id for c in pool}) == 100
    assert all(c.text for c in pool)
    assert read_topic(TREC_DL / "topics.dl19-passage.txt", "1037798") == "who is robert gray"
