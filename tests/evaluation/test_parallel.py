from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from ragidx.evaluation.parallel import DEFAULT_QUESTIONS, build_parallel, gold_ids, kb_path, load_jsonl, main
from ragidx.evaluation.retrieval import load_beir

PATHS = ["text/swriter/guide/a.html", "text/scalc/guide/b.html", "text/smath/guide/c.html", "text/shared/guide/d.html"]
QUESTIONS = [
    {"id": "p1", "question_en": "insert a table", "question_ru": "вставить таблицу", "gold_paths": [PATHS[0]]},
    {"id": "p2", "question_en": "sum a column", "question_ru": "сумма столбца", "gold_paths": [PATHS[1], PATHS[2]]},
]


def _kb(lang: str, paths: list[str]) -> list[dict[str, Any]]:
    source = f"help-{lang}"
    return [
        {"id": f"{source}:{p}", "title": f"{lang} {p}", "url": p, "source": source, "lang": lang, "text": f"{lang} {i}"}
        for i, p in enumerate(paths)
    ]


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    return {
        "en": _write_jsonl(tmp_path / "en.jsonl", _kb("en", PATHS)),
        "ru": _write_jsonl(tmp_path / "ru.jsonl", _kb("ru", PATHS[:3])),  # no Russian d.html
        "q": _write_jsonl(tmp_path / "q.jsonl", QUESTIONS),
    }


def _qrels(root: Path) -> list[list[str]]:
    return [line.split("\t") for line in (root / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()]


def test_kb_path_drops_the_source() -> None:
    assert kb_path({"id": "libreoffice-7.4-help-en:text/swriter/guide/x.html"}) == "text/swriter/guide/x.html"


def test_cli_writes_en_ru_and_mixed_beir_folders(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "beir"
    argv = ["--en", str(files["en"]), "--ru", str(files["ru"]), "--questions", str(files["q"]), "--out", str(out)]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["questions"] == 2
    assert summary["en"] == {"corpus": 4, "queries": 2, "qrels": 3}
    assert summary["ru"] == {"corpus": 3, "queries": 2, "qrels": 3}
    assert summary["mixed"] == {"corpus": 7, "queries": 4, "qrels": 6}

    corpus = load_jsonl(out / "ru" / "corpus.jsonl")
    assert [d["_id"] for d in corpus] == [f"help-ru:{p}" for p in PATHS[:3]]
    assert corpus[0] == {"_id": f"help-ru:{PATHS[0]}", "title": f"ru {PATHS[0]}", "text": "ru 0"}
    assert load_jsonl(out / "ru" / "queries.jsonl") == [
        {"_id": "p1", "text": "вставить таблицу"},
        {"_id": "p2", "text": "сумма столбца"},
    ]
    assert _qrels(out / "en") == [
        ["query-id", "corpus-id", "score"],
        ["p1", f"help-en:{PATHS[0]}", "1"],
        ["p2", f"help-en:{PATHS[1]}", "1"],
        ["p2", f"help-en:{PATHS[2]}", "1"],
    ]

    en, ru, mixed = (load_beir(out / lang) for lang in ("en", "ru", "mixed"))
    assert en.queries == {"p1": "insert a table", "p2": "sum a column"}
    assert ru.qrels == {"p1": {f"help-ru:{PATHS[0]}": 1}, "p2": {f"help-ru:{PATHS[1]}": 1, f"help-ru:{PATHS[2]}": 1}}
    assert len(mixed.queries) == 4 and mixed.queries["p2-ru"] == "сумма столбца"
    assert mixed.qrels["p1-en"] == {f"help-en:{PATHS[0]}": 1} and mixed.qrels["p1-ru"] == {f"help-ru:{PATHS[0]}": 1}
    assert sum(1 for _ in mixed.articles()) == 7


def test_missing_gold_path_names_the_question(files: dict[str, Path], tmp_path: Path) -> None:
    questions = [*QUESTIONS, {"id": "p3", "question_en": "x", "question_ru": "икс", "gold_paths": [PATHS[3]]}]
    kbs = {"en": load_jsonl(files["en"]), "ru": load_jsonl(files["ru"])}
    with pytest.raises(ValueError, match=r"question p3: .*ru knowledge base: text/shared/guide/d\.html"):
        build_parallel(kbs, questions, tmp_path / "out")
    with pytest.raises(ValueError, match="question p9: missing question_ru"):
        build_parallel(kbs, [{"id": "p9", "question_en": "x", "gold_paths": [PATHS[0]]}], tmp_path / "out")


def test_cli_reports_a_missing_gold_and_exits_2(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    q = _write_jsonl(tmp_path / "q3.jsonl", [{**QUESTIONS[0], "id": "p7", "gold_paths": [PATHS[3]]}])
    argv = ["--en", str(files["en"]), "--ru", str(files["ru"]), "--questions", str(q), "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    assert "question p7" in capsys.readouterr().err


# --- the committed question file against the full LibreOffice help ----------------------------------
SHARED_KB = Path(__file__).resolve().parents[3] / "shared" / "data" / "kb"
CYRILLIC = re.compile(r"[\u0400-\u04ff]")


def _cyrillic_share(text: str) -> float:
    letters = [c for c in text if c.isalpha()]
    return sum(bool(CYRILLIC.match(c)) for c in letters) / max(1, len(letters))


def test_committed_questions_match_the_full_kbs() -> None:
    en_kb, ru_kb = SHARED_KB / "libreoffice_en.jsonl", SHARED_KB / "libreoffice_ru.jsonl"
    if not (en_kb.is_file() and ru_kb.is_file()):
        pytest.skip(f"the full LibreOffice help KBs are not on this machine ({en_kb.parent} lives in ../shared/data)")
    questions = load_jsonl(DEFAULT_QUESTIONS)
    ids = [q["id"] for q in questions]
    assert len(questions) >= 60 and len(set(ids)) == len(ids)
    for q in questions:
        assert q["question_en"].strip() and q["question_ru"].strip(), q["id"]
        assert CYRILLIC.search(q["question_ru"]), q["id"]
        assert 1 <= len(q["gold_paths"]) <= 2, q["id"]
    ru = load_jsonl(ru_kb)
    golds = {"en": gold_ids(questions, load_jsonl(en_kb), "en"), "ru": gold_ids(questions, ru, "ru")}
    assert set(golds["en"]) == set(golds["ru"]) == set(ids)
    ru_text = {a["id"]: a["text"] for a in ru}
    for qid, docs in golds["ru"].items():  # the Russian gold article is translated, not an English copy
        assert all(_cyrillic_share(ru_text[d]) >= 0.6 for d in docs), qid
