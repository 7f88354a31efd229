"""`tierank qualifications delete` (issue 22, item 26): a qualification that refuses a judge can
be deleted, after which jobs take the judge again."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_process import POOL, QUERY, tierank
from shared_data import TREC_DL

EXIT_NOT_QUALIFIED = 5
EXIT_USAGE = 2


@pytest.mark.usefixtures("shared_data")
def test_deleting_a_refusing_qualification_admits_the_judge_again(tmp_path: Path) -> None:
    db = ("--db", str(tmp_path / "tierank.db"))
    qualified = tierank(
        "qualify", "--judge", "lexical", "--qrels", str(TREC_DL / "qrels.dl19-passage.txt"),
        "--topics", str(TREC_DL / "topics.dl19-passage.txt"),
        "--passages", str(TREC_DL / "passages" / "dl19-rankllm-union-passages.jsonl"),
        "--run", str(TREC_DL / "runs" / "run.rankllm.BM25.dl19.top100.trec"),
        "--queries", "10", "--json", *db,
    )  # fmt: skip
    assert qualified.returncode == EXIT_NOT_QUALIFIED, qualified.stderr
    refused = tierank("rank", POOL, "--query", QUERY, "--top-k", "3", *db)
    assert refused.returncode == 1 and "FAILED_PRECONDITION" in refused.stderr

    listed = tierank("qualifications", *db)
    name = listed.stdout.split()[0]
    assert name.startswith("qualifications/")
    deleted = tierank("qualifications", "delete", name.removeprefix("qualifications/"), *db)
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.startswith(f"deleted {name}  lexical")

    assert tierank("qualifications", *db).stdout.startswith("no qualifications")
    admitted = tierank("rank", POOL, "--query", QUERY, "--top-k", "3", *db)
    assert admitted.returncode == 0, admitted.stderr
    again = tierank("qualifications", "delete", name, *db)
    assert again.returncode == 1
    assert again.stderr == f"tierank qualifications: NOT_FOUND: {name} not found\n"


def test_delete_needs_a_name_and_names_need_delete(tmp_path: Path) -> None:
    db = ("--db", str(tmp_path / "tierank.db"))
    nameless = tierank("qualifications", "delete", *db)
    assert nameless.returncode == EXIT_USAGE and "NAME" in nameless.stderr
    stray = tierank("qualifications", "list", "qualifications/x", *db)
    assert stray.returncode == EXIT_USAGE
    malformed = tierank("qualifications", "delete", "qualifications/a/b", *db)
    assert malformed.returncode == EXIT_USAGE
    assert "name: must look like 'qualifications/{id}'" in malformed.stderr
