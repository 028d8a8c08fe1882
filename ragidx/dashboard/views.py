"""The dashboard's Streamlit layer: the chat for the people who ask, and the tuning, ingest and evaluation pages.

Only layout lives here; what is shown is computed in :mod:`ragidx.dashboard.answers`,
:mod:`~ragidx.dashboard.charts`, :mod:`~ragidx.dashboard.examples`, :mod:`~ragidx.dashboard.feedback`,
:mod:`~ragidx.dashboard.uploads` and :mod:`~ragidx.dashboard.evaluation`. The base engine is built once per
process with ``st.cache_resource`` (and closed when the cache releases it); every configuration chosen on the
Tuning page gets a derived engine that shares its models, stores and local model servers. The Tuning page's
choices last for the browser session (``persist_state="session"``), so the chat uses them on every page.

Example:
    In ``streamlit_app.py``::

        views.select_engine()  # the configured settings and the Tuning page's choices; stores the engine
        page.run()             # a page script calls views.chat_page(views.current_engine())
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, Literal

import streamlit as st

from ingestion.formats import document_formats
from ragidx.agent.answer import Answer, Progress
from ragidx.config import Settings
from ragidx.dashboard.answers import (
    AnswerStream,
    article_rows,
    budget_view,
    citation_lines,
    cited_passages,
    default_call,
    escape_markdown,
    exact_figures,
    flash_reasons,
    plain_reason,
    plain_summary,
    queue_text,
    safe_markdown,
    stage_text,
    token_rows,
)
from ragidx.dashboard.charts import LATENCY_METRICS, QUALITY_METRICS, stages_chart, tokens_chart, window_gauge
from ragidx.dashboard.engines import apply_overrides, derive_engine, factory_spec, load_factory, settings_key
from ragidx.dashboard.evaluation import (
    ANSWER_METRICS,
    answer_table,
    run_answer_eval,
    run_retrieval_eval,
    stage_rows,
    stage_table,
)
from ragidx.dashboard.examples import example_question, example_titles
from ragidx.dashboard.feedback import Rating, rate, record_turn
from ragidx.dashboard.uploads import UploadResult, accepted_suffixes, ingest_upload, uploads_enabled
from ragidx.safe_text import printable
from ragidx.wording import counted

logger = logging.getLogger(__name__)

ENGINE_KEY = "ragidx_engine"
CHAT_KEY = "ragidx_chat"
SESSION_KEY = "ragidx_session_id"
EXAMPLE_KEY = "ragidx_example_question"
INGEST_KEY = "ragidx_ingest_results"
EVAL_KEY = "ragidx_eval_result"
ANSWERS_KEY = "ragidx_answer_eval"
SETTINGS_ERROR_KEY = "ragidx_settings_error"
FILTERS_ERROR_KEY = "ragidx_filters_error"

LOCAL_MODELS = ("qwen2.5-0.5b", "qwen2.5-1.5b")
WINDOWS = (2048, 4096, 8192, 16384, 32768, 131072)
RERANKERS = ("offline", "none", "cross-encoder", "cohere")
COMPRESSORS = ("extractive", "llm")
TUNING: Literal["session"] = (
    "session"  # the Tuning page's widgets keep their values for the browser session, on every page
)


# --- engines ---------------------------------------------------------------------------------------
def _close(engine: Any) -> None:
    close = getattr(engine, "close", None)
    if callable(close):
        close()


@st.cache_resource(show_spinner="Opening the knowledge base…", on_release=_close, hash_funcs={Settings: settings_key})
def base_engine(spec: str, settings: Settings) -> Any:
    """The engine built by the configured factory: once per process and configuration."""
    return load_factory(spec)(settings)


@st.cache_resource(show_spinner=False, max_entries=8, hash_funcs={Settings: settings_key})
def derived_engine(spec: str, base_settings: Settings, settings: Settings) -> Any:
    """An engine for the Tuning page's settings sharing the base engine's parts (never closed itself)."""
    return derive_engine(base_engine(spec, base_settings), settings)


def shared_engine() -> Any:
    """The base engine, outside any session (the document route reads its article store)."""
    return base_engine(factory_spec(), Settings())


def current_engine() -> Any:
    """The engine :func:`select_engine` chose in this run (the base engine if it did not run)."""
    engine = st.session_state.get(ENGINE_KEY)
    return engine if engine is not None else base_engine(factory_spec(), Settings())


# --- the engine for this run: configured settings and the Tuning page's choices ----------------------------
_TUNED: dict[str, tuple[str, Any]] = {
    "set_model": ("llm.model", str),
    "set_window": ("llm.context_window", int),
    "set_max_out": ("llm.max_output_tokens", int),
    "set_trigger": ("budget_trigger_pct", lambda v: v / 100),
    "set_target": ("budget_target_pct", lambda v: v / 100),
    "set_min": ("budget_min_article_tokens", int),
    "set_floor": ("budget_relevance_floor", lambda v: v / 100),
    "set_compressor": ("compressor", str),
    "set_reranker": ("reranker", str),
    "set_top_k": ("top_k", int),
}
"""Tuning page widget key → the setting it changes and how its value converts."""
FILTERS_KEY = "search_filters"
"""Session-state key of the parsed search filters (``MetadataFilters`` or None)."""


def _tuning_overrides() -> dict[str, Any]:
    """The settings the Tuning page's widgets changed in this session (none before it was opened)."""
    overrides: dict[str, Any] = {}
    for key, (name, convert) in _TUNED.items():
        if key in st.session_state:
            section, _, field = name.rpartition(".")
            target = overrides.setdefault(section, {}) if section else overrides
            target[field] = convert(st.session_state[key])
    return overrides


def select_engine() -> Any:
    """The engine for this run (configured settings with the Tuning page's choices) and the sidebar's summary
    of it; stored for the page scripts (:func:`current_engine`)."""
    try:
        base_settings = Settings()
    except Exception as exc:  # a broken ragidx.toml or RAGIDX_* variable: say so instead of a traceback
        st.error(f"ragidx settings could not be read: {exc}")
        st.stop()
    spec = factory_spec()
    settings = base_settings
    st.session_state[SETTINGS_ERROR_KEY] = None
    overrides = _tuning_overrides()
    if overrides:
        try:
            settings = apply_overrides(base_settings, overrides)
        except ValueError as exc:
            st.session_state[SETTINGS_ERROR_KEY] = f"{exc}. Using the configured settings until this is fixed."
    try:
        engine = derived_engine(spec, base_settings, settings)
    except Exception as exc:
        st.error(f"The engine could not be built: {type(exc).__name__}: {exc}")
        st.stop()
    st.session_state[ENGINE_KEY] = engine
    _filters()
    _sidebar(engine, tuned=settings != base_settings)
    return engine


def _filters() -> None:
    """Metadata filters for every search of the chat, from the Tuning page (as ``ragidx search --filter``)."""
    from ragidx.stores.filters import parse_filters

    text = st.session_state.get("set_filters") or ""
    st.session_state[FILTERS_ERROR_KEY] = None
    try:
        st.session_state[FILTERS_KEY] = parse_filters(line for line in text.splitlines() if line.strip())
    except ValueError as exc:
        st.session_state[FILTERS_ERROR_KEY] = f"{exc}. Searching without filters until this is fixed."
        st.session_state[FILTERS_KEY] = None


def _sidebar(engine: Any, *, tuned: bool) -> None:
    bar = st.sidebar
    try:
        stats = engine.stats()
    except Exception as exc:
        bar.warning(f"Knowledge base unavailable: {exc}")
        return
    articles, chunks = counted(stats["articles"], "article"), counted(stats["chunks"], "chunk")
    bar.caption(f"Knowledge base: {articles}, {chunks} ({stats['store']})")
    if not stats["articles"]:
        bar.info("The knowledge base is empty: add files on the Ingest page.")
    # The dashboard has no sign-in to tell who is asking: it asks as the public (articles that carry no principals).
    bar.caption("Asking as: the public (articles open to everyone)")
    if tuned:
        bar.caption("Answers use the settings changed on the Tuning page (for this browser session).")
    if st.session_state.get(FILTERS_KEY) is not None:
        bar.caption("Searches are filtered (Tuning page).")


# --- tuning ----------------------------------------------------------------------------------------
def _window_label(tokens: int) -> str:
    return f"{tokens // 1024}K ({tokens} tokens)" if tokens % 1024 == 0 else f"{tokens} tokens"


def _initial(key: str, **value: Any) -> dict[str, Any]:
    """The widget's starting value, only the first time (later its kept value stands; giving both warns)."""
    return {} if key in st.session_state else value


def tuning_page(engine: Any) -> None:
    """Settings to try live (model, window, budgets, reranker, filters) for this browser session's chat."""
    st.title("Tuning")
    st.markdown(
        "Try settings live: the chat of this browser session answers with them at once, on every page, and the "
        "engine is built once per choice. The configured settings (`ragidx.toml`, `RAGIDX_*` variables) and other "
        "sessions are unchanged."
    )
    s = Settings()
    left, right = st.columns(2)
    models = list(dict.fromkeys([s.llm.model, *LOCAL_MODELS]))
    model = left.selectbox(
        "Model",
        models,
        key="set_model",
        persist_state=TUNING,
        help="Local packaged models run on this machine.",
    )
    where = s.llm.api_base if s.llm.api_base and model == s.llm.model else "local (llama.cpp server on loopback)"
    left.caption(f"Endpoint: {where}")
    windows = sorted({*WINDOWS, s.llm.context_window})
    left.selectbox(
        "Context window",
        windows,
        format_func=_window_label,
        key="set_window",
        persist_state=TUNING,
        help="Pick 4K to watch the budget compress and drop articles.",
        **_initial("set_window", index=windows.index(s.llm.context_window)),
    )
    left.number_input(
        "Reserved output tokens",
        min_value=16,
        max_value=8192,
        key="set_max_out",
        persist_state=TUNING,
        **_initial("set_max_out", value=s.llm.max_output_tokens),
    )
    left.radio(
        "Compressor",
        COMPRESSORS,
        horizontal=True,
        key="set_compressor",
        persist_state=TUNING,
        **_initial("set_compressor", index=COMPRESSORS.index(s.compressor)),
    )
    left.selectbox(
        "Reranker",
        RERANKERS,
        key="set_reranker",
        persist_state=TUNING,
        **_initial("set_reranker", index=RERANKERS.index(s.reranker)),
    )
    left.number_input(
        "Articles per search (top_k)",
        min_value=1,
        max_value=50,
        key="set_top_k",
        persist_state=TUNING,
        **_initial("set_top_k", value=s.top_k),
    )
    right.slider(
        "Budget trigger (% of window)",
        10,
        100,
        key="set_trigger",
        persist_state=TUNING,
        **_initial("set_trigger", value=round(s.budget_trigger_pct * 100)),
    )
    right.slider(
        "Budget target (% of window)",
        10,
        100,
        key="set_target",
        persist_state=TUNING,
        **_initial("set_target", value=round(s.budget_target_pct * 100)),
    )
    right.number_input(
        "Minimum tokens per article",
        min_value=16,
        max_value=8192,
        key="set_min",
        persist_state=TUNING,
        **_initial("set_min", value=s.budget_min_article_tokens),
    )
    right.slider(
        "Relevance floor (% of the best article's score)",
        0,
        90,
        key="set_floor",
        persist_state=TUNING,
        help="Articles scored under this share of the best one are left out of the prompt, even when they fit.",
        **_initial("set_floor", value=round(s.budget_relevance_floor * 100)),
    )
    right.text_area(
        "Filters (one per line)",
        key="set_filters",
        persist_state=TUNING,
        placeholder="product=writer\nproduct in calc,impress",
        help="Only articles whose metadata matches every line: key=value, key!=value, key>=value (also >, <, <=), "
        "key in a,b, key not in a,b. Applied inside the search, before its top-k.",
    )
    problem = st.session_state.get(SETTINGS_ERROR_KEY)
    if problem:
        st.error(problem)
    problem = st.session_state.get(FILTERS_ERROR_KEY)
    if problem:
        st.error(problem)
    if st.button("Back to the configured settings", key="reset_tuning"):
        for key in (*_TUNED, "set_filters"):
            st.session_state.pop(key, None)
        st.rerun()


# --- chat ------------------------------------------------------------------------------------------
def chat_page(engine: Any) -> None:
    """Ask questions: each answer with its sources and a thumbs up or down; how it was made is one click away."""
    st.title("Ask the knowledge base")
    history: list[dict[str, Any]] = st.session_state.setdefault(CHAT_KEY, [])
    session_id: str = st.session_state.setdefault(SESSION_KEY, uuid.uuid4().hex)
    if history and st.button("New conversation", key="new_conversation"):
        history.clear()
        st.session_state[SESSION_KEY] = uuid.uuid4().hex
        st.rerun()
    for turn in history:
        with st.chat_message(turn["role"]):
            _render_turn(turn, engine, session_id)
    typed = st.chat_input("Ask a question about the knowledge base", key="question")
    question = typed or st.session_state.pop(EXAMPLE_KEY, None)
    examples = st.empty()  # one place for the examples: emptied at once when a question comes (no stale buttons)
    if not question:
        if not history:
            with examples.container():
                _examples(engine)
        return
    history.append({"role": "user", "text": question})
    with st.chat_message("user"):
        st.markdown(safe_markdown(question))
    with st.chat_message("assistant"):
        history.append(_ask(engine, question, session_id))
    st.rerun()  # drawn from the history, where it stays: its expander and thumbs keep their state on later runs


def _examples(engine: Any) -> None:
    """An empty chat: a few article titles of the knowledge base, each a button that asks about it."""
    try:
        titles = example_titles(engine.article_store)
    except Exception as exc:  # an unavailable store: the sidebar says so already
        logger.info("no example questions: %s", exc)
        return
    if not titles:
        return
    st.markdown("**Try asking about:**")
    for i, title in enumerate(titles):
        st.button(
            title,
            key=f"example_{i}",
            on_click=st.session_state.__setitem__,
            args=(EXAMPLE_KEY, example_question(title)),
            help=f"Asks: {example_question(title)}",
        )


def _ask(engine: Any, question: str, session_id: str) -> dict[str, Any]:
    """Ask and stream the answer; meanwhile say truthfully where the question is: waiting for the model (its
    place in the queue when asked), then the stage the engine reports, with the time really spent."""
    stage = st.empty()
    queue = getattr(engine, "model_queue", None)
    stats = queue.stats() if queue is not None else None
    waiting = queue_text(stats.waiting, stats.busy, stats.slots) if stats is not None else None
    stage.caption(waiting or "Starting…")
    placeholder = st.empty()
    text = ""

    def show(progress: Progress) -> None:  # the stage, until the answer's first words replace it
        if not text:
            stage.caption(stage_text(progress))

    filters = st.session_state.get(FILTERS_KEY)
    stream = AnswerStream(
        engine.stream_ask(question, session_id=session_id, progress=True, filters=filters),
        on_progress=show,
    )
    try:
        with st.spinner("Working on your question…", show_time=True):
            for piece in stream.pieces():
                if not text:
                    stage.caption("Writing the answer")
                text += piece
                placeholder.markdown(safe_markdown(text) + "▌")
        answer = stream.answer
    except Exception as exc:  # show what failed (endpoint down, window too small) rather than a traceback
        logger.warning("ask failed: %s", exc)
        stage.empty()
        placeholder.empty()
        why = printable(f"{type(exc).__name__}: {exc}", keep_newlines=True)
        record_turn(engine, question, None, turn_id=uuid.uuid4().hex, error=exc)
        return {"role": "assistant", "error": f"The engine could not answer: {why}"}
    stage.empty()
    placeholder.empty()
    turn_id = uuid.uuid4().hex
    record_turn(engine, question, answer, turn_id=turn_id)  # the question log (the thumbs rate this id)
    return {"role": "assistant", "answer": answer, "id": turn_id}


def _render_turn(turn: dict[str, Any], engine: Any, session_id: str) -> None:
    if "error" in turn:
        st.error(turn["error"])
        return
    answer: Answer | None = turn.get("answer")
    if answer is None:
        st.markdown(safe_markdown(turn["text"]))
        return
    render_answer(answer, turn["id"])
    _feedback(answer, turn["id"], session_id, engine)


def render_answer(answer: Answer, key: str) -> None:
    """The answer text and its sources; how it was made (articles, budget, checks, timings) collapsed below."""
    st.markdown(safe_markdown(answer.text))  # the model may echo an article's links and control characters
    if answer.not_found:
        why = plain_reason(answer.not_found_reason)
        st.info("The knowledge base does not answer this" + (f": {why}." if why else "."))
    lines = citation_lines(answer, served_files=True)  # streamlit_app.py serves the ingested files
    if lines:
        st.markdown("**Sources**\n\n" + "\n".join(f"- {line}" for line in lines))
    passages = cited_passages(answer)  # each quoted sentence highlighted in its article's text
    if passages:
        with st.expander("Where the sources say it", expanded=False):
            st.markdown("\n\n".join(f"**{heading}**  \n{text}" for heading, text in passages))
    for error in answer.tool_errors:
        st.warning(f"A search failed, so this answer may miss articles: {printable(error)}")
    with st.expander("How this answer was made", expanded=False):
        words, figures = st.tabs(["In plain words", "Exact figures"])
        with words:
            st.markdown("\n".join(f"- {escape_markdown(line)}" for line in plain_summary(answer)))
            reasons = flash_reasons(answer)
            if reasons:
                st.markdown("**Why the reranker kept them**\n\n" + "\n".join(f"- **{t}**: {r}" for t, r in reasons))
        with figures:
            _figures(answer, key)


def _figures(answer: Answer, key: str) -> None:
    """The engineering view's exact figures: articles and their scores, the budget per call, the raw values."""
    rows = article_rows(answer)
    st.markdown("**Articles the model was shown**")
    if rows:
        st.dataframe(rows, hide_index=True)
    else:
        st.caption("No article was retrieved.")
    reports = answer.budget_reports
    if reports:
        pick = default_call(reports)
        if len(reports) > 1:
            pick = st.selectbox(
                "Model call",
                range(len(reports)),
                index=pick,
                format_func=lambda i: f"call {i + 1} of {len(reports)}" + (" (answer)" if i == pick else ""),
                key=f"budget_call_{key}",
            )
        report = reports[pick]
        view = budget_view(report, answer)
        cols = st.columns(4)
        cols[0].metric("Compressor", view.compressor)
        cols[1].metric("Prompt tokens", f"{view.tokens_after:,}")
        cols[2].metric("Before the budget", f"{view.tokens_before:,}")
        cols[3].metric("Window (tokens)", f"{view.context_window:,}")
        for note in view.notes:
            st.warning(note)
        # theme=None: Streamlit's theme hides the limit lines of the layered gauge.
        st.altair_chart(window_gauge(report), theme=None, width="stretch")
        token_data = token_rows(report)
        if token_data:
            st.altair_chart(tokens_chart(token_data), width="stretch")
    st.table({"figure": [name for name, _ in exact_figures(answer)], "value": [v for _, v in exact_figures(answer)]})


def _feedback(answer: Answer, turn_id: str, session_id: str, engine: Any) -> None:
    """A thumbs up or down, stored with the turn in the question log when clicked (ragidx.dashboard.feedback)."""
    key = f"feedback_{turn_id}"
    row = st.container(horizontal=True, vertical_alignment="center")
    row.caption("Was this answer right?", width="content")
    row.feedback(
        "thumbs",
        key=key,
        on_change=_record_feedback,
        args=(key, turn_id, engine),
    )


def _record_feedback(key: str, turn_id: str, engine: Any) -> None:
    value = st.session_state.get(key)
    rating: Rating | None = None if value is None else ("up" if value == 1 else "down")
    st.toast(rate(engine, turn_id, rating))


# --- ingest ----------------------------------------------------------------------------------------
UPLOADS_HELP = """Uploads are **off** on this dashboard. It has no sign-in, so an upload would let anyone who can open
it change what the knowledge base answers.

- To add files now, use the command line: `ragidx ingest FILE_OR_FOLDER`.
- To allow uploads here, put the dashboard where only people who may change the knowledge base reach it (on
  loopback, as it starts, or behind a sign-in proxy), then set `uploads = true` under `[dashboard]` in
  `ragidx.toml` (or `RAGIDX_DASHBOARD__UPLOADS=true`) and restart it.

Even with uploads on, an upload only adds and updates its own articles: it never replaces an article ingested
from another source, nor one that is not open to everyone."""


def ingest_page(engine: Any) -> None:
    """Upload JSONL / documents and ingest them with progress, when uploads are on; else say how to add files."""
    st.title("Add files")
    if not uploads_enabled(engine.settings):
        st.info(UPLOADS_HELP)
        return
    st.markdown(
        'JSONL: one article per line, `{"id", "title", "url", "text"}`. Documents '
        f"({document_formats()}): one article per file. Re-ingesting is idempotent: unchanged articles cost "
        "nothing. Each upload adds and updates its own articles only: a line whose id is already used by another "
        "source, or by an article not open to everyone, is skipped."
    )
    files = st.file_uploader(f"Files ({', '.join(accepted_suffixes())})", accept_multiple_files=True, key="uploads")
    if st.button("Ingest", type="primary", disabled=not files, key="ingest"):
        results: list[UploadResult] = []
        for f in files or []:
            bar = st.progress(0.0, text=f"{f.name}: starting")

            def on_progress(done: int, total: int | None, bar: Any = bar, name: str = f.name) -> None:
                share = min(1.0, done / total) if total else 0.0
                bar.progress(share, text=f"{name}: {done} of {total or '?'} articles read")

            result = ingest_upload(engine, f.name, f.getvalue(), on_progress=on_progress)
            bar.empty()
            results.append(result)
        st.session_state[INGEST_KEY] = results
        st.rerun()  # the sidebar's article count includes the new articles
    for result in st.session_state.get(INGEST_KEY, []):
        if result.ok:
            st.success(result.summary())
        else:
            st.error(result.summary())
        if result.report.get("language_warning"):
            st.warning(result.report["language_warning"])
        if result.report.get("injection_flagged"):
            ids = ", ".join(result.report.get("injection_flagged_ids", []))
            st.warning(
                f"{result.report['injection_flagged']} articles hold instruction-like text (flagged; the model reads "
                f"it replaced by '[instruction-like text removed]'): {ids}"
            )
        if result.skipped:
            with st.expander(f"{result.name}: {len(result.skipped)} lines skipped"):
                st.code("\n".join(result.skipped[:200]), language=None)


# --- evaluation ------------------------------------------------------------------------------------
def evaluation_page(engine: Any) -> None:
    """Run the retrieval evaluation on a BEIR folder and plot its stages; then the answer evaluation."""
    _retrieval_evaluation(engine)
    _answer_evaluation(engine)


def _retrieval_evaluation(engine: Any) -> None:
    st.title("Retrieval evaluation")
    st.markdown(
        "Every stage of the retrieval chain on a BEIR folder (`corpus.jsonl`, `queries.jsonl`, `qrels/test.tsv`): "
        "dense, hybrid, hybrid + rerank and the full chain, with the sidebar's reranker."
    )
    folder = st.text_input("BEIR folder", key="beir_folder", placeholder="../shared/data/beir_scifact")
    cols = st.columns(2)
    limit = cols[0].number_input("Queries (0 = all)", min_value=0, value=50, key="eval_limit")
    depth = cols[1].number_input("Depth (articles ranked per query)", min_value=10, value=100, key="eval_depth")
    if st.button("Run evaluation", type="primary", key="run_eval"):
        try:
            with st.spinner("Evaluating… the first run embeds the corpus once; later runs reuse it"):
                st.session_state[EVAL_KEY] = run_retrieval_eval(
                    engine, folder, limit=int(limit) or None, depth=int(depth)
                )
        except (FileNotFoundError, ValueError) as exc:
            st.session_state[EVAL_KEY] = None
            st.error(str(exc))
            return
    result: dict[str, Any] | None = st.session_state.get(EVAL_KEY)
    if not result:
        return
    st.caption(
        f"{result['dataset']}: {result['queries']} queries, {result['articles']} articles, {result['chunks']} chunks · "
        f"reranker {result['reranker']} · alpha {result['hybrid_alpha']} · depth {result['depth']}"
    )
    st.dataframe(stage_table(result), hide_index=True)
    rows = stage_rows(result)
    left, right = st.columns(2)
    left.altair_chart(stages_chart(rows, QUALITY_METRICS), width="stretch")
    right.altair_chart(stages_chart(rows, LATENCY_METRICS), width="stretch")
    default = result.get("default_config")
    if default:
        st.caption(
            "As configured (top_k {top_k}, {candidate_chunks} candidates): nDCG@10 {ndcg@10}, "
            "p50 {p50_ms} ms, p95 {p95_ms} ms".format(**default)
        )


def _answer_evaluation(engine: Any) -> None:
    st.header("Answer evaluation")
    st.markdown(
        "Questions asked of the knowledge base ingested here, with the sidebar's model: how many answers hold "
        "a gold answer, whether their citations hold it, and how long each took. A questions file is JSONL, "
        "one `{id, question, answers[], gold_kb_ids[], answerable}` a line (`ragidx eval answers` runs the same "
        "from the command line, ingesting the KB for you)."
    )
    path = st.text_input(
        "Questions file", key="answers_file", placeholder="ragidx/evaluation/data/answers_libreoffice_en.jsonl"
    )
    limit = st.number_input("Questions (0 = all, spread over the file)", min_value=0, value=5, key="answers_limit")
    if st.button("Ask them", key="run_answers"):
        try:
            with st.spinner("Asking… each answer takes as long as in the chat"):
                st.session_state[ANSWERS_KEY] = run_answer_eval(engine, path, limit=int(limit) or None)
        except (FileNotFoundError, ValueError) as exc:
            st.session_state[ANSWERS_KEY] = None
            st.error(str(exc))
            return
    result = st.session_state.get(ANSWERS_KEY)
    if not result:
        return
    summary, rows = result
    shown = [(label, summary.get(key)) for key, label in ANSWER_METRICS.items() if summary.get(key) is not None]
    for col, (label, value) in zip(st.columns(len(shown)), shown, strict=True):
        col.metric(label, value)
    st.caption(
        f"{summary['questions']} questions ({summary['answerable']} answerable) · prompt tokens per question "
        f"{summary['prompt_tokens_mean']} · overflows {summary['overflows']} · errors {summary['errors']}"
    )
    st.dataframe(answer_table(rows), hide_index=True)
