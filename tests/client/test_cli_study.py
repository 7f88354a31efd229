"""`tierank study` as a user runs it: files with a BOM and CRLF line ends, an embedded server,
the system table, qrels.txt, report.json and report.html, then list/show/report again."""

from __future__ import annotations

import json
import random
from pathlib import Path

from cli_process import tierank

SYSTEMS = {"good": 0.3, "fair": 1.5, "poor": 6.0}


def write_collection(root: Path, queries: int = 5, docs: int = 20) -> dict[str, Path]:
    """Topics (with a BOM and CRLF), three runs of known quality, passages whose hidden grade
    the oracle judge reads, and the human qrels."""
    rng = random.Random(11)
    topics, passages, qrels = [], [], []
    runs: dict[str, list[str]] = {name: [] for name in SYSTEMS}
    for q in range(queries):
        qid = f"q{q}"
        topics.append(f"{qid}\ttopic {q}")
        grades = {f"{qid}d{d}": rng.choice([0, 0, 1, 2, 3]) for d in range(docs)}
        for doc, grade in grades.items():
            passages.append(json.dumps({"docid": doc, "contents": f"text of {doc}",
                                        "metadata": {"score": grade}}))  # fmt: skip
            qrels.append(f"{qid} 0 {doc} {grade}")
        for name, noise in SYSTEMS.items():
            scored = sorted(grades, key=lambda d: -(grades[d] + rng.gauss(0, noise)))
            runs[name] += [f"{qid} Q0 {d} {i + 1} {100 - i} {name}" for i, d in enumerate(scored)]
    paths = {
        "topics": root / "topics.tsv",
        "passages": root / "passages.jsonl",
        "qrels": root / "qrels.txt",
    }
    paths["topics"].write_bytes(b"\xef\xbb\xbf" + "\r\n".join(topics).encode() + b"\r\n")
    paths["passages"].write_text("\n".join(passages) + "\n")
    paths["qrels"].write_text("\n".join(qrels) + "\n")
    for name, lines in runs.items():
        paths[name] = root / f"{name}.trec"
        paths[name].write_text("\n".join(lines) + "\n")
    return paths


def study_run(paths: dict[str, Path], db: Path, out: Path, *extra: str, systems=SYSTEMS):  # type: ignore[no-untyped-def]
    return tierank(
        "study", "run", "--topics", str(paths["topics"]), "--passages", str(paths["passages"]),
        *(f for name in systems for f in ("--run", f"{name}={paths[name]}")),
        "--depth", "8", "--top-k", "5", "--judge", "oracle?noise=0.2", "--bands", "3:3,6:2,9:1",
        "--human-qrels", str(paths["qrels"]), "--db", str(db), "--output-dir", str(out), *extra,
    )  # fmt: skip


def test_a_study_from_files_ranks_the_systems_and_writes_its_results(tmp_path: Path) -> None:
    paths = write_collection(tmp_path)
    db, out = tmp_path / "t.db", tmp_path / "results"
    result = study_run(paths, db, out)

    assert result.returncode in (0, 4), result.stderr
    assert "ranking by nDCG@10: good > fair > poor" in result.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["schema"] == "tierank.study.report/1"
    assert report["ranking"] == ["good", "fair", "poor"]
    assert report["queries"]["total"] == 5
    good = next(s for s in report["systems"] if s["name"] == "good")
    ndcg = good["measures"]["nDCG@10"]
    assert ndcg["low"] <= ndcg["mean"] <= ndcg["high"]
    assert report["agreement"]["kendall_tau"] == 1.0
    assert len(report["per_query"]) == 5 and all(q["job"] for q in report["per_query"])
    qrels = (out / "qrels.txt").read_text().splitlines()
    assert {line.split()[0] for line in qrels} == {f"q{q}" for q in range(5)}
    assert "<svg" in (out / "report.html").read_text()

    listed = tierank("study", "list", "--db", str(db), "--json")
    assert listed.returncode == 0, listed.stderr
    (study,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert study["state"] == "STUDY_STATE_SUCCEEDED"
    again = tierank("study", "report", study["name"], "--db", str(db),
                    "--output-dir", str(tmp_path / "again"), "--json")  # fmt: skip
    assert again.returncode == result.returncode
    assert json.loads(again.stdout)["systems"] == report["systems"]


def test_bad_study_inputs_are_usage_errors_naming_the_problem(tmp_path: Path) -> None:
    paths = write_collection(tmp_path, queries=2)
    db = tmp_path / "t.db"
    no_name = tierank("study", "run", "--topics", str(paths["topics"]), "--passages",
                      str(paths["passages"]), "--run", str(paths["good"]),
                      "--db", str(db))  # fmt: skip
    assert no_name.returncode == 2
    assert "expected NAME=RUN.trec" in no_name.stderr
    (tmp_path / "empty.tsv").write_text("")
    paths["topics"] = tmp_path / "empty.tsv"
    empty = study_run(paths, db, tmp_path / "out")
    assert empty.returncode == 2
    assert "empty.tsv" in empty.stderr


def test_a_run_added_later_is_judged_where_it_adds_documents(tmp_path: Path) -> None:
    paths = write_collection(tmp_path)
    # The added run as a user may have it: a BOM and CRLF line ends.
    poor = tmp_path / "poor-crlf.trec"
    poor.write_bytes(b"\xef\xbb\xbf" + paths["poor"].read_text().replace("\n", "\r\n").encode())
    db = tmp_path / "t.db"
    first = study_run(paths, db, tmp_path / "first", "--json", systems=["good", "fair"])
    assert first.returncode in (0, 4), first.stderr
    before = json.loads(first.stdout)
    name = before["study"]

    def add_run(*extra: str):  # type: ignore[no-untyped-def]
        return tierank("study", "add-run", name, f"poor={poor}", "--db", str(db),
                       "--output-dir", str(tmp_path / "after"), *extra)  # fmt: skip

    # The study was sent only the passages its first pools needed: the added run's holes have
    # none, and nothing is judged until they come.
    missing = add_run()
    assert missing.returncode == 2 and "have no passage" in missing.stderr
    added = add_run("--passages", str(paths["passages"]), "--json", "--request-id", "r1")
    assert added.returncode in (0, 4), added.stderr
    assert "round 1 adds" in added.stderr
    report = json.loads(added.stdout)
    assert set(report["ranking"]) == {"good", "fair", "poor"}
    (pooling,) = [entry for entry in report["pooling"] if entry["system"] == "poor"]
    assert pooling["round"] == 1 and pooling["documents_added"] > 0
    # Pooled to depth 8, its top 10 is judged more than before, if not wholly.
    assert pooling["judged_before"] < pooling["judged_after"] <= 1.0
    assert report["cost"]["calls"] > before["cost"]["calls"]
    page = (tmp_path / "after" / "report.html").read_text()
    assert "poor (added in round 1)" in page

    # The same command again judges nothing twice; a pooled system is refused by name.
    again = add_run("--passages", str(paths["passages"]), "--json", "--request-id", "r1")
    assert again.returncode == added.returncode, again.stderr
    assert json.loads(again.stdout)["cost"] == report["cost"]
    pooled = add_run("--request-id", "r2")
    assert pooled.returncode == 2 and "'poor' is pooled already" in pooled.stderr
