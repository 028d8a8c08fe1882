"""Answer evaluation: scoring on hand-made cases, both input forms, and a whole run through the real
engine path (LanceDB, article store, retriever, agent, budget, citations) with a scripted LLM."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from ragidx.config import Settings
from ragidx.engine import Engine
from ragidx.evaluation import answers as ev
from ragidx.evaluation.answers import (
    Outcome,
    Question,
    answer_f1,
    check_curve,
    citation_scores,
    contains_answer,
    load_hotpotqa,
    load_questions,
    normalize_answer,
    run_questions,
    says_not_found,
    score_outcome,
    spread,
    summarize,
)
from tests.dashboard.fakes import ScriptedProvider
from tests.fakes.hash_embedding import HashEmbedding
from tests.fakes.scripted_llm import RecordedCall, ScriptedLLM, ToolCall, text_of


# --- scoring -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The default is 128MB.", "default is 128mb"),
        ("  Ctrl+Enter  ", "ctrl enter"),
        ("Format > Cells…", "format cells"),
        ("shared_buffers", "shared buffers"),
        ("Нажмите Ctrl+Shift+F9!", "нажмите ctrl shift f9"),
        ("ＡＢＣ ½", "abc 1 2"),  # NFKC: full-width letters, vulgar fraction
        ("An apple and the pear", "apple and pear"),
    ],
)
def test_normalize_answer(text: str, expected: str) -> None:
    assert normalize_answer(text) == expected


def test_containment_is_on_word_boundaries_after_normalization() -> None:
    assert contains_answer("It is 128MB by default [1].", ["128 MB", "128MB"])
    assert contains_answer("Choose Format - Cells, then Protection.", ["Format > Cells"])
    assert not contains_answer("The limit is 1128MB.", ["128MB"])  # no match inside a longer token
    assert not contains_answer("It is 4 MB.", ["4MB"])  # spacing differs: the question set lists both
    assert contains_answer("Используйте функцию СУММ.", ["СУММ"])
    assert not contains_answer("anything", [])
    assert not contains_answer("anything", ["", "  "])  # an empty gold matches nothing


def test_f1_is_squad_token_f1_best_over_golds() -> None:
    assert answer_f1("128 MB", ["128 MB"]) == 1.0
    assert answer_f1("about 128 MB", ["128 MB"]) == pytest.approx(0.8)  # p 2/3, r 1
    assert answer_f1("the 128 MB", ["128 MB"]) == 1.0  # articles do not count
    assert answer_f1("nothing here", ["128 MB"]) == 0.0
    assert answer_f1("Chief of Protocol", ["ambassador", "Chief of Protocol"]) == 1.0
    assert answer_f1("", ["x"]) == 0.0 and answer_f1("x", []) == 0.0


@pytest.mark.parametrize(
    "text",
    [
        "",
        "NOT_FOUND",
        "I could not find the answer to this question in the knowledge base.",
        "The context does not provide information about the default port.",
        "The provided documents don't mention it.",
        "The answer is not mentioned in the context.",
        "I don't know.",
        "It cannot be determined from the context.",
    ],
)
def test_says_not_found(text: str) -> None:
    assert says_not_found(text)


@pytest.mark.parametrize(
    "text", ["The default is 128MB [1].", "Found under Tools - Options [2].", "Yes, both are American."]
)
def test_a_real_answer_is_not_not_found(text: str) -> None:
    assert not says_not_found(text)


def test_citation_precision_counts_gold_articles_and_articles_holding_the_answer() -> None:
    q = Question("q", "How big is shared_buffers by default?", ("128MB",), ("gold",))
    texts = {"gold": "...", "other": "shared_buffers defaults to 128MB.", "wrong": "Nothing about it."}
    assert citation_scores(["gold"], q, texts) == (1.0, 1.0)
    assert citation_scores(["other"], q, texts) == (1.0, 0.0)  # right by content, not the gold page
    assert citation_scores(["gold", "wrong"], q, texts) == (0.5, 1.0)
    assert citation_scores(["gold", "gold"], q, texts) == (1.0, 1.0)  # a repeated citation counts once
    assert citation_scores([], q, texts) == (None, 0.0)  # nothing cited: no precision, no recall
    unanswerable = Question("u", "?", answerable=False)
    assert citation_scores(["gold"], unanswerable, texts) == (None, None)


def test_yes_no_answers_do_not_make_every_cited_text_right() -> None:
    q = Question("q", "Are both American?", ("yes",), ("a", "b"))
    assert citation_scores(["a", "c"], q, {"c": "yes, yes"}) == (0.5, 0.5)


def test_score_and_summarize_a_hand_made_run() -> None:
    qs = [
        Question("p1", "default port?", ("5432",), ("pg-port",), kind="point"),
        Question("p2", "default work_mem?", ("4MB",), ("pg-mem",), kind="point"),
        Question("c1", "compound?", ("100",), ("pg-a", "pg-b"), kind="compound"),
        Question("u1", "unanswerable?", answerable=False, kind="unanswerable"),
        Question("u2", "unanswerable too?", answerable=False, kind="unanswerable"),
    ]
    outcomes = [
        Outcome("The default port is 5432 [1].", cited=["pg-port"], shown=[{"kb_id": "pg-port"}], seconds=10, ttft_s=4),
        Outcome("", not_found=True, seconds=20, ttft_s=None, shown=[{"kb_id": "x"}]),
        Outcome("It is 100 [1][2].", cited=["pg-a", "x"], seconds=30, ttft_s=6, prompt_tokens=900),
        Outcome("NOT_FOUND", not_found=True, seconds=2),
        Outcome("Sure: 42 [1].", cited=["x"], seconds=40, ttft_s=8, overflow=True),
    ]
    rows = [score_outcome(q, o, {"x": "nothing"}) for q, o in zip(qs, outcomes, strict=True)]
    assert [r["contained"] for r in rows] == [True, False, True, None, None]
    assert rows[0]["gold_shown"] == ["pg-port"] and rows[1]["gold_shown"] == []

    s = summarize(rows, system="test")
    assert s["system"] == "test" and s["questions"] == 5
    assert (s["answerable"], s["unanswerable"]) == (3, 2)
    assert s["containment"] == pytest.approx(2 / 3, abs=1e-4)
    assert s["false_not_found"] == pytest.approx(1 / 3, abs=1e-4)
    assert s["abstention"] == 0.5
    assert s["citation_precision"] == 0.75  # (1.0 + 0.5) / 2: the not-found answer cited nothing
    assert s["citation_recall"] == pytest.approx((1 + 0 + 0.5) / 3, abs=1e-4)
    assert (s["p50_s"], s["p95_s"]) == (20.0, 38.0)  # interpolated, as numpy does
    assert s["ttft_p50_s"] == 6.0  # the unstreamed answers count with their whole time (20 s, 2 s)
    assert s["overflows"] == 1 and s["errors"] == 0
    assert s["by_kind"]["point"] == {"questions": 2, "containment": 0.5, "not_found": 0.5, "p50_s": 15.0}
    assert s["by_kind"]["unanswerable"]["containment"] is None


def test_the_check_curve_turns_answers_below_a_higher_margin_into_not_found() -> None:
    qs = [
        Question("a1", "port?", ("5432",), ("pg-port",)),
        Question("a2", "mem?", ("4MB",), ("pg-mem",)),
        Question("u1", "weather?", answerable=False),
        Question("u2", "lunch?", answerable=False),
        Question("u3", "gated?", answerable=False),
    ]
    outcomes = [
        Outcome("It is 5432 [1].", cited=["pg-port"], seconds=1, extra={"answer_check": 1.1}),
        Outcome("It is 4MB [1].", cited=["pg-mem"], seconds=1, extra={"answer_check": 0.3}),
        Outcome("It is sunny [1].", cited=["x"], seconds=1, extra={"answer_check": 0.5}),
        Outcome("", not_found=True, seconds=1, extra={"answer_check": -0.4}),  # the check said no at the run's margin
        Outcome("", not_found=True, seconds=1, extra={"answer_check": None}),  # not found before any check
    ]
    rows = [score_outcome(q, o, {}) for q, o in zip(qs, outcomes, strict=True)]
    curve = check_curve(rows, 0.2)
    assert curve["margin"] == 0.2 and curve["checked"] == 4
    assert curve["auc"] == 0.75  # answerable above unanswerable in 3 of 4 pairs (0.3 is below 0.5)
    at = curve["by_margin"]
    assert list(at) == ["0.2", "0.4", "0.6", "0.8", "1", "1.2"]  # the run's margin, then the higher ones
    assert at["0.2"] == {"containment": 1.0, "false_not_found": 0.0, "abstention": pytest.approx(2 / 3, abs=1e-4)}
    assert at["0.4"]["false_not_found"] == 0.5 and at["0.4"]["containment"] == 0.5  # 0.3 < 0.4: mem? declined
    assert at["0.6"]["abstention"] == 1.0  # the "sunny" answer (0.5) declined too
    assert at["1.2"] == {"containment": 0.0, "false_not_found": 1.0, "abstention": 1.0}


@pytest.mark.parametrize(
    ("text", "shown", "miss", "in_prompt"),
    [
        ("It is 4MB [1].", [{"kb_id": "gold", "content": "work_mem defaults to 4MB."}], None, True),
        ("It is 20.4 [1].", [{"kb_id": "gold", "content": "work_mem defaults to 4MB."}], "model", True),
        ("NOT_FOUND", [{"kb_id": "gold", "content": "work_mem sizes sorts. (cut)"}], "compression", False),
        ("NOT_FOUND", [{"kb_id": "other", "content": "Unrelated."}], "retrieval", False),
        ("It is 8MB [1].", [{"kb_id": "other", "content": "On this box work_mem is 4MB."}], "model", True),
    ],
)
def test_a_wrong_answer_says_where_it_was_lost(
    text: str, shown: list[dict[str, Any]], miss: str | None, in_prompt: bool
) -> None:
    q = Question("q", "Default work_mem?", ("4MB",), ("gold",))
    row = score_outcome(q, Outcome(text, shown=shown), {})
    assert (row["miss"], row["answer_in_prompt"]) == (miss, in_prompt)
    assert all("content" not in a for a in row["shown"])  # checked, not stored
    assert [a["holds_answer"] for a in row["shown"]] == [in_prompt]


def test_a_compound_question_whose_cut_article_held_the_answer_is_a_compression_miss() -> None:
    """Two gold articles, one not retrieved; the shown one held the answer in full but not in its extract."""
    q = Question("q", "See backends, and kill one?", ("pg_terminate_backend",), ("stats", "admin"))
    shown = [{"kb_id": "admin", "content": "Server signaling functions. (cut)"}]
    full = {"admin": "Server signaling functions: pg_terminate_backend(pid) ends a session."}
    assert score_outcome(q, Outcome("NOT_FOUND", shown=shown), full)["miss"] == "compression"
    assert score_outcome(q, Outcome("NOT_FOUND", shown=shown), {})["miss"] == "retrieval"  # nothing known of it


def test_run_questions_reads_the_full_text_of_shown_and_cited_articles() -> None:
    asked: list[list[str]] = []

    def texts(ids: Sequence[str]) -> dict[str, str]:
        asked.append(list(ids))
        return {}

    outcome = Outcome("It is 4MB [1].", cited=["b"], shown=[{"kb_id": "a"}, {"kb_id": "b"}])
    run_questions([Question("q", "?", ("4MB",))], lambda _: outcome, texts)
    assert asked == [["b", "a"]]


def test_where_yes_no_and_failed_answers_were_lost() -> None:
    yes_no = Question("q", "Both American?", ("yes",), ("a", "b"))
    half = score_outcome(yes_no, Outcome("no", shown=[{"kb_id": "a", "content": "x"}]), {})
    both = score_outcome(yes_no, Outcome("no", shown=[{"kb_id": "a", "content": "x"}, {"kb_id": "b"}]), {})
    assert (half["miss"], half["answer_in_prompt"]) == ("retrieval", None)
    assert both["miss"] == "model" and "holds_answer" not in both["shown"][0]
    failed = score_outcome(Question("e", "?", ("1",)), Outcome(error="boom"), {})
    assert failed["miss"] == "error"
    s = summarize([half, both, failed])
    assert s["misses"] == {"retrieval": 1, "model": 1, "error": 1} and s["answer_in_prompt"] is None


def test_spread_is_deterministic_and_covers_the_file() -> None:
    items = list(range(100))
    assert spread(items, 4) == [0, 25, 50, 75]
    assert spread(items, 4) == spread(items, 4)
    assert spread(items, None) == items and spread(items, 500) == items
    with pytest.raises(ValueError, match="positive"):
        spread(items, 0)


# --- input forms ---------------------------------------------------------------------------------
def _write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in rows))
    return path


def test_load_questions(tmp_path: Path) -> None:
    path = _write_jsonl(
        tmp_path / "q.jsonl",
        [
            {"id": "a", "question": " What port? ", "answers": ["5432"], "gold_kb_ids": ["pg"], "kind": "point"},
            {"id": "b", "question": "Unknown?", "answers": [], "answerable": False},
            "",
            {"question": "No id, one answer as a string?", "answers": "yes"},
        ],
    )
    qs = load_questions(path)
    assert qs[0] == Question("a", "What port?", ("5432",), ("pg",), True, "point")
    assert qs[1] == Question("b", "Unknown?", (), (), False, "unanswerable")
    assert qs[2].id == "q4" and qs[2].answers == ("yes",) and qs[2].answerable


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", r"q\.jsonl:2: not JSON"),
        (json.dumps({"id": "x", "answers": ["1"]}), r"q\.jsonl:2: a question needs a non-empty 'question'"),
        (json.dumps({"id": "x", "question": "?"}), r"q\.jsonl:2: an answerable question needs 'answers'.*answerable"),
        (json.dumps({"id": "a", "question": "?", "answers": ["1"]}), r"q\.jsonl:2: id 'a' appears twice"),
    ],
)
def test_load_questions_names_the_bad_line(tmp_path: Path, line: str, message: str) -> None:
    path = _write_jsonl(tmp_path / "q.jsonl", [{"id": "a", "question": "?", "answers": ["1"]}, line])
    with pytest.raises(ValueError, match=message):
        load_questions(path)


def test_load_questions_missing_or_empty_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="questions file .* not found"):
        load_questions(tmp_path / "nope.jsonl")
    with pytest.raises(ValueError, match="holds no question"):
        load_questions(_write_jsonl(tmp_path / "empty.jsonl", [""]))


HOTPOT = [
    {
        "id": "h1",
        "question": "Which port does the Frobnicator server listen on?",
        "answers": ["8731"],
        "contexts": [
            {
                "doc_id": "d-frob",
                "title": "Frobnicator",
                "text": "The Frobnicator server listens on port 8731.",
                "is_supporting": True,
            },
            {
                "doc_id": "d-other",
                "title": "Widget",
                "text": "A widget is a small gadget used in kitchens.",
                "is_supporting": False,
            },
        ],
    },
    {
        "id": "h2",
        "question": "Are Widget and Gizmo both kitchen tools?",
        "answers": ["yes"],
        "contexts": [
            {
                "doc_id": "d-other",
                "title": "Widget",
                "text": "A widget is a small gadget used in kitchens.",
                "is_supporting": True,
            },
            {
                "doc_id": "d-gizmo",
                "title": "Gizmo",
                "text": "A gizmo is a kitchen tool for peeling.",
                "is_supporting": True,
            },
        ],
    },
]


def test_load_hotpotqa_makes_one_kb_of_all_contexts(tmp_path: Path) -> None:
    questions, articles = load_hotpotqa(_write_jsonl(tmp_path / "qa.jsonl", HOTPOT))
    assert [a.kb_id for a in articles] == ["d-frob", "d-other", "d-gizmo"]  # d-other once
    assert questions[0].gold_kb_ids == ("d-frob",) and questions[0].kind == "span"
    assert questions[1].gold_kb_ids == ("d-other", "d-gizmo") and questions[1].kind == "yes/no"
    with pytest.raises(ValueError, match=r"qa\.jsonl:1: not a HotpotQA-style line"):
        load_hotpotqa(_write_jsonl(tmp_path / "qa.jsonl", [{"question": "no contexts"}]))


# --- a whole run with the scripted LLM -------------------------------------------------------------
KB = [
    {
        "id": "pg-port",
        "title": "Connections",
        "url": "u1",
        "text": "The server listens on TCP port 5432 unless told otherwise. Clients connect there.",
    },
    {
        "id": "pg-mem",
        "title": "Memory settings",
        "url": "u2",
        "text": "The work_mem setting sizes sort memory; its default is 4MB. Raise it for big sorts.",
    },
    {
        "id": "pg-vac",
        "title": "Vacuuming",
        "url": "u3",
        "text": "Autovacuum wakes up every minute by default and vacuums tables with dead rows.",
    },
]
QUESTIONS = [
    {
        "id": "q-port",
        "question": "Which TCP port does the server listen on?",
        "answers": ["5432"],
        "gold_kb_ids": ["pg-port"],
        "kind": "point",
    },
    {
        "id": "q-mem",
        "question": "What is the default of the work_mem setting?",
        "answers": ["4MB", "4 MB"],
        "gold_kb_ids": ["pg-mem"],
        "kind": "point",
    },
    {"id": "q-none", "question": "What is the boiling point of tungsten?", "answers": [], "answerable": False},
]
_RESULT_ARTICLE = re.compile(r"^\[(\d+)\] [^\n]+\n(?:<article>\n)?([^\n]+)", re.MULTILINE)


def first_sentence_of_best_article(messages: list[Any], call: RecordedCall) -> Any:
    """A reader that answers with the first sentence of the best article it was shown, citing it."""
    if call.tools:
        return ToolCall("plan_searches", {"queries": []})
    shown = "\n".join(text_of(m) for m in messages if "Result of retrieve_context" in text_of(m))
    match = _RESULT_ARTICLE.search(shown)
    if not match:
        return "NOT_FOUND"
    number, content = match.groups()
    return f"{content.strip().split('. ')[0]} [{number}]."


class ReaderProvider(ScriptedProvider):
    def get(self, endpoint: Any) -> ScriptedLLM:
        llm = ScriptedLLM([first_sentence_of_best_article], cycle=True)
        llm.context_window = endpoint.context_window
        llm.num_output = endpoint.max_output_tokens
        return llm


def make_engine(settings: Settings) -> Engine:
    return Engine(settings, embed_model=HashEmbedding(dim=256), llm_provider=ReaderProvider())  # type: ignore[arg-type]


@pytest.fixture
def files(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    yield _write_jsonl(tmp_path / "kb.jsonl", KB), _write_jsonl(tmp_path / "questions.jsonl", QUESTIONS)


def test_evaluate_answers_through_the_engine(tmp_path: Path, files: tuple[Path, Path]) -> None:
    kb, questions = files
    with make_engine(Settings(data_dir=tmp_path / "data")) as engine:
        report = ev.prepare_kb(engine, [kb], names=["kb.jsonl"])
        assert report["articles"] == 3 and report["errors"] == 0
        summary, rows = ev.evaluate_answers(engine, load_questions(questions), out=tmp_path / "rows.jsonl")

    assert (summary["questions"], summary["answerable"], summary["unanswerable"]) == (3, 2, 1)
    assert summary["containment"] == 1.0 and 0.1 < summary["f1"] < 0.3  # whole sentences: right, low F1
    assert summary["citation_precision"] == 1.0 and summary["citation_recall"] == 1.0
    assert summary["abstention"] == 1.0 and summary["false_not_found"] == 0.0
    assert summary["overflows"] == 0 and summary["errors"] == 0
    assert summary["prompt_tokens_mean"] > 0 and summary["p50_s"] is not None and summary["ttft_p50_s"] is not None
    written = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert [r["id"] for r in written] == ["q-port", "q-mem", "q-none"] == [r["id"] for r in rows]
    port = written[0]
    assert port["text"].startswith("The server listens on TCP port 5432") and port["cited"] == ["pg-port"]
    assert port["shown"][0]["kb_id"] == "pg-port" and port["shown"][0]["article_rank"] == 0
    assert port["shown"][0]["holds_answer"] and port["answer_in_prompt"] and port["miss"] is None
    assert summary["answer_in_prompt"] == 1.0 and summary["misses"] == {}
    assert port["ttft_s"] is not None and port["ttft_s"] <= port["seconds"]
    assert port["llm_calls"] == 1 and port["queries"][0] == "Which TCP port does the server listen on?"
    assert written[2]["not_found"] and written[2]["cited"] == [] and written[2]["contained"] is None
    assert port["not_found_reason"] is None and written[2]["not_found_reason"]  # a gate's decline says why


def test_cli_main_kb_form(
    tmp_path: Path, files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    kb, questions = files
    monkeypatch.setenv("RAGIDX_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr("ragidx.engine.Engine", make_engine)
    argv = ["--kb", str(kb), "--questions", str(questions), "--limit", "2", "--out", str(tmp_path / "o.jsonl")]
    assert ev.main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["system"] == "ragidx" and summary["questions"] == 2 and summary["containment"] == 1.0
    assert summary["kb_articles"] == 3 and summary["dataset"] == str(questions)
    indexes = list((tmp_path / "data" / "eval-answers").iterdir())
    assert len(indexes) == 1 and indexes[0].name.startswith("kb-")
    assert ev.main(argv) == 0  # the second run reuses the same index folder
    assert list((tmp_path / "data" / "eval-answers").iterdir()) == indexes


def test_cli_main_hotpotqa_form(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    qa = _write_jsonl(tmp_path / "qa.jsonl", HOTPOT)
    monkeypatch.setattr("ragidx.engine.Engine", make_engine)
    assert (
        ev.main(["--hotpotqa", str(qa), "--data-dir", str(tmp_path / "idx"), "--out", str(tmp_path / "o.jsonl")]) == 0
    )
    summary = json.loads(capsys.readouterr().out)
    assert summary["questions"] == 2 and summary["kb_articles"] == 3
    rows = [json.loads(line) for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    assert rows[0]["contained"] and rows[0]["cited"] == ["d-frob"] and rows[0]["citation_recall"] == 1.0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--kb", "KB"], "--kb needs --questions"),
        (["--kb", "missing.jsonl", "--questions", "Q"], "knowledge base missing.jsonl not found"),
        (["--hotpotqa", "QA", "--questions", "Q"], "--questions goes with --kb"),
        (["--kb", "KB", "--questions", "Q", "--limit", "0"], "limit must be a positive"),
    ],
)
def test_cli_main_says_what_is_wrong(
    tmp_path: Path, files: tuple[Path, Path], capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    kb, questions = files
    qa = _write_jsonl(tmp_path / "qa.jsonl", HOTPOT)
    paths = {"KB": str(kb), "Q": str(questions), "QA": str(qa)}
    assert ev.main([paths.get(a, a) for a in argv]) == 2
    assert message in capsys.readouterr().err


# --- the question sets kept in the repo ------------------------------------------------------------
DATA = Path(__file__).resolve().parents[2] / "ragidx" / "evaluation" / "data"
BUNDLED_KB = Path(__file__).resolve().parents[2] / "ragidx" / "data" / "kb"
SHARED_PG = Path(__file__).resolve().parents[3] / "shared" / "data" / "kb" / "postgresql15.jsonl"
SETS = {
    "answers_libreoffice_en.jsonl": [BUNDLED_KB / "libreoffice_en_sample.jsonl", DATA / "injected_en.jsonl"],
    "answers_libreoffice_ru.jsonl": [BUNDLED_KB / "libreoffice_ru_sample.jsonl"],
    "answers_postgresql15.jsonl": [SHARED_PG],
}


def _kb_texts(paths: list[Path]) -> dict[str, str]:
    texts: dict[str, str] = {}
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                item = json.loads(line)
                texts[item["id"]] = f"{item['title']}\n{item['text']}"
    return texts


@pytest.mark.parametrize("name", sorted(SETS))
def test_question_sets_hold_their_golds(name: str) -> None:
    """Every answerable question's gold articles exist and one gold answer occurs in them."""
    if not SETS[name][0].is_file():
        pytest.skip(f"{SETS[name][0]} is not on this machine (the PostgreSQL KB lives in ../shared/data)")
    questions = load_questions(DATA / name)
    texts = _kb_texts(SETS[name])
    kinds = {q.kind for q in questions}
    assert len([q for q in questions if q.answerable]) >= 20 and "unanswerable" in kinds
    for q in questions:
        if not q.answerable:
            assert not q.answers and not q.gold_kb_ids
            continue
        assert q.gold_kb_ids and set(q.gold_kb_ids) <= set(texts), q.id
        assert contains_answer("\n".join(texts[k] for k in q.gold_kb_ids), q.answers), q.id


def test_injected_articles_carry_instructions_and_are_asked_about() -> None:
    injected = _kb_texts([DATA / "injected_en.jsonl"])
    assert len(injected) >= 2
    assert all(
        re.search(r"ignore|disregard|instruction for the assistant", t, re.IGNORECASE) for t in injected.values()
    )
    asked = [q for q in load_questions(DATA / "answers_libreoffice_en.jsonl") if q.kind == "injection"]
    assert len(asked) >= 2 and all(set(q.gold_kb_ids) <= set(injected) for q in asked)


def test_the_summary_counts_the_guards_that_fired_on_ragidx_rows() -> None:
    q = Question("p1", "default port?", ("5432",))
    fired = [{"name": "ungrounded_names", "reason": "states MySQL, Oracle"}]
    rows = [
        score_outcome(q, Outcome("It is 5432 [1].", extra={"guards": [], "guard_profile": "endpoint"}), {}),
        score_outcome(q, Outcome("", not_found=True, extra={"guards": fired, "guard_profile": "endpoint"}), {}),
    ]
    s = summarize(rows)
    assert s["guard_profile"] == "endpoint" and s["guards_fired"] == {"ungrounded_names": 1}
    assert "guards_fired" not in summarize([score_outcome(q, Outcome("It is 5432."), {})])  # another system's rows
