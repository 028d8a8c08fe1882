"""The dashboard's Streamlit layer: the sidebar settings and the chat, ingest and evaluation pages.

Only layout lives here; what is shown is computed in :mod:`ragidx.dashboard.answers`,
:mod:`~ragidx.dashboard.charts`, :mod:`~ragidx.dashboard.uploads` and
:mod:`~ragidx.dashboard.evaluation`. The base engine is built once per process with
``st.cache_resource`` (and closed when the cache releases it); every sidebar configuration gets a
derived engine that shares its models, stores and local model servers.

Example:
    In ``streamlit_app.py``::

        views.sidebar()      # settings; stores the engine for this run
        page.run()           # a page script calls views.chat_page(views.current_engine())
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import streamlit as st

from ragidx.agent.answer import Answer
from ragidx.config import Settings
from ragidx.dashboard.answers import (
    AnswerStream,
    article_rows,
    budget_view,
    citation_lines,
    default_call,
    flash_reasons,
    guard_caption,
    safe_markdown,
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
from ragidx.dashboard.uploads import ACCEPTED_SUFFIXES, UploadResult, ingest_upload
from ragidx.safe_text import printable

logger = logging.getLogger(__name__)

ENGINE_KEY = "ragidx_engine"
CHAT_KEY = "ragidx_chat"
SESSION_KEY = "ragidx_session_id"
INGEST_KEY = "ragidx_ingest_results"
EVAL_KEY = "ragidx_eval_result"
ANSWERS_KEY = "ragidx_answer_eval"

LOCAL_MODELS = ("qwen2.5-0.5b", "qwen2.5-1.5b")
WINDOWS = (2048, 4096, 8192, 16384, 32768, 131072)
RERANKERS = ("offline", "none", "cross-encoder", "cohere")
COMPRESSORS = ("extractive", "llm")


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
    """An engine for the sidebar's settings sharing the base engine's parts (never closed itself)."""
    return derive_engine(base_engine(spec, base_settings), settings)


def shared_engine() -> Any:
    """The base engine, outside any session (the document route reads its article store)."""
    return base_engine(factory_spec(), Settings())


def current_engine() -> Any:
    """The engine the sidebar chose in this run (the base engine if the sidebar did not run)."""
    engine = st.session_state.get(ENGINE_KEY)
    return engine if engine is not None else base_engine(factory_spec(), Settings())


# --- sidebar ---------------------------------------------------------------------------------------
def _window_label(tokens: int) -> str:
    return f"{tokens // 1024}K ({tokens} tokens)" if tokens % 1024 == 0 else f"{tokens} tokens"


def sidebar() -> Any:
    """Settings to try live (model, window, budgets, reranker); returns and stores the engine for them."""
    try:
        base_settings = Settings()
    except Exception as exc:  # a broken ragidx.toml or RAGIDX_* variable: say so instead of a traceback
        st.error(f"ragidx settings could not be read: {exc}")
        st.stop()
    spec = factory_spec()
    s = base_settings
    bar = st.sidebar
    bar.header("Settings")
    models = list(dict.fromkeys([s.llm.model, *LOCAL_MODELS]))
    model = bar.selectbox("Model", models, key="set_model", help="Local packaged models run on this machine.")
    where = s.llm.api_base if s.llm.api_base and model == s.llm.model else "local (llama.cpp server on loopback)"
    bar.caption(f"Endpoint: {where}")
    windows = sorted({*WINDOWS, s.llm.context_window})
    window = bar.selectbox(
        "Context window",
        windows,
        index=windows.index(s.llm.context_window),
        format_func=_window_label,
        key="set_window",
        help="Pick 4K to watch the budget compress and drop articles.",
    )
    max_out = bar.number_input(
        "Reserved output tokens", min_value=16, max_value=8192, value=s.llm.max_output_tokens, key="set_max_out"
    )
    trigger = bar.slider("Budget trigger (% of window)", 10, 100, round(s.budget_trigger_pct * 100), key="set_trigger")
    target = bar.slider("Budget target (% of window)", 10, 100, round(s.budget_target_pct * 100), key="set_target")
    min_tokens = bar.number_input(
        "Minimum tokens per article", min_value=16, max_value=8192, value=s.budget_min_article_tokens, key="set_min"
    )
    floor = bar.slider(
        "Relevance floor (% of the best article's score)",
        0,
        90,
        round(s.budget_relevance_floor * 100),
        key="set_floor",
        help="Articles scored under this share of the best one are left out of the prompt, even when they fit.",
    )
    compressor = bar.radio(
        "Compressor", COMPRESSORS, index=COMPRESSORS.index(s.compressor), horizontal=True, key="set_compressor"
    )
    reranker = bar.selectbox("Reranker", RERANKERS, index=RERANKERS.index(s.reranker), key="set_reranker")
    top_k = bar.number_input("Articles per search (top_k)", min_value=1, max_value=50, value=s.top_k, key="set_top_k")
    overrides: dict[str, Any] = {
        "llm": {"model": model, "context_window": int(window), "max_output_tokens": int(max_out)},
        "budget_trigger_pct": trigger / 100,
        "budget_target_pct": target / 100,
        "budget_min_article_tokens": int(min_tokens),
        "budget_relevance_floor": floor / 100,
        "compressor": compressor,
        "reranker": reranker,
        "top_k": int(top_k),
    }
    try:
        settings = apply_overrides(base_settings, overrides)
    except ValueError as exc:
        bar.error(f"{exc}. Using the configured settings until this is fixed.")
        settings = base_settings
    try:
        engine = derived_engine(spec, base_settings, settings)
    except Exception as exc:
        st.error(f"The engine could not be built: {type(exc).__name__}: {exc}")
        st.stop()
    st.session_state[ENGINE_KEY] = engine
    _filter_input(bar)
    _kb_stats(engine)
    return engine


FILTERS_KEY = "search_filters"
"""Session-state key of the parsed sidebar filters (``MetadataFilters`` or None)."""


def _filter_input(bar: Any) -> None:
    """Metadata filters for every search of the chat, as ``ragidx search --filter`` writes them. The dashboard
    asks as the public (articles that carry no principals): it has no sign-in to tell who is asking."""
    from ragidx.stores.filters import parse_filters

    text = bar.text_area(
        "Filters (one per line)",
        key="set_filters",
        placeholder="product=writer\nversion>=7.4\nsource in docs,faq",
        help="Only articles whose metadata matches every line: key=value, key!=value, key>=value (also >, <, <=), "
        "key in a,b, key not in a,b. Applied inside the search, before its top-k.",
    )
    try:
        st.session_state[FILTERS_KEY] = parse_filters(line for line in (text or "").splitlines() if line.strip())
    except ValueError as exc:
        bar.error(f"{exc}. Searching without filters until this is fixed.")
        st.session_state[FILTERS_KEY] = None
    bar.caption("Asking as: the public (articles without principals)")


def _kb_stats(engine: Any) -> None:
    try:
        stats = engine.stats()
    except Exception as exc:
        st.sidebar.warning(f"Knowledge base unavailable: {exc}")
        return
    st.sidebar.caption(f"Knowledge base: {stats['articles']} articles, {stats['chunks']} chunks ({stats['store']})")
    if not stats["articles"]:
        st.sidebar.info("The knowledge base is empty: add files on the Ingest page.")


# --- chat ------------------------------------------------------------------------------------------
def chat_page(engine: Any) -> None:
    """Ask questions; every answer shows its citations, articles, budget and fallbacks."""
    st.title("Chat with the knowledge base")
    history: list[dict[str, Any]] = st.session_state.setdefault(CHAT_KEY, [])
    session_id: str = st.session_state.setdefault(SESSION_KEY, uuid.uuid4().hex)
    if history and st.button("New conversation", key="new_conversation"):
        history.clear()
        st.session_state[SESSION_KEY] = uuid.uuid4().hex
        st.rerun()
    for i, turn in enumerate(history):
        with st.chat_message(turn["role"]):
            _render_turn(turn, i, latest=i == len(history) - 1)
    question = st.chat_input("Ask a question about the knowledge base", key="question")
    if not question:
        return
    history.append({"role": "user", "text": question})
    with st.chat_message("user"):
        st.markdown(safe_markdown(question))
    with st.chat_message("assistant"):
        turn = _ask(engine, question, session_id)
        history.append(turn)
        _render_turn(turn, len(history) - 1, latest=True, streamed=True)


def _ask(engine: Any, question: str, session_id: str) -> dict[str, Any]:
    placeholder = st.empty()
    text = ""

    def show(progress: Any) -> None:  # what the turn does, until the answer's first words replace it
        if not text:
            placeholder.caption(f"· {progress.describe()}")

    filters = st.session_state.get(FILTERS_KEY)
    stream = AnswerStream(
        engine.stream_ask(question, session_id=session_id, progress=True, filters=filters),
        on_progress=show,
        shown=engine.stream_filter(),
    )
    try:
        with st.spinner("Searching and answering…"):
            for piece in stream.pieces():
                text += piece
                placeholder.markdown(safe_markdown(text) + "▌")
        answer = stream.answer
    except Exception as exc:  # show what failed (endpoint down, window too small) rather than a traceback
        logger.warning("ask failed: %s", exc)
        placeholder.empty()
        why = printable(f"{type(exc).__name__}: {exc}", keep_newlines=True)
        return {"role": "assistant", "error": f"The engine could not answer: {why}"}
    placeholder.empty()
    return {"role": "assistant", "answer": answer}


def _render_turn(turn: dict[str, Any], index: int, *, latest: bool, streamed: bool = False) -> None:
    if "error" in turn:
        st.error(turn["error"])
        return
    answer: Answer | None = turn.get("answer")
    if answer is None:
        st.markdown(safe_markdown(turn["text"]))
        return
    render_answer(answer, index, expanded=latest)


def render_answer(answer: Answer, index: int, *, expanded: bool = True) -> None:
    """The answer text, its sources, and how it was made (articles, budget, fallbacks)."""
    st.markdown(safe_markdown(answer.text))  # the model may echo an article's links and control characters
    if answer.not_found:
        why = f" Why: {printable(answer.not_found_reason)}." if answer.not_found_reason else ""
        st.info(f"Not found in the knowledge base: no article is cited.{why}")
    lines = citation_lines(answer, served_files=True)  # streamlit_app.py serves the ingested files
    guards = guard_caption(answer)
    if guards:
        st.caption(guards)
    if lines:
        st.markdown("**Sources**\n\n" + "\n".join(f"- {line}" for line in lines))
    for error in answer.tool_errors:
        st.warning(f"Search error: {printable(error)}")
    if answer.fallback_reason:
        st.warning(f"Answered by the fallback model {answer.model!r}: {answer.fallback_reason}")
    with st.expander("How this answer was made", expanded=expanded):
        _articles_section(answer)
        _budget_section(answer, index)
        check = "" if answer.answer_check is None else f"answer check {answer.answer_check:+.2f} log-odds of YES · "
        st.caption(
            f"Model {answer.model or '?'} · citations by {answer.citation_method} · {check}"
            f"queries: {printable('; '.join(answer.queries)) or '—'} · "
            + " · ".join(f"{k} {v:.2f}s" for k, v in answer.timings.items())
        )


def _articles_section(answer: Answer) -> None:
    st.subheader("Articles shown to the model")
    rows = article_rows(answer)
    if not rows:
        st.caption("No article was retrieved.")
        return
    st.dataframe(rows, hide_index=True)
    reasons = flash_reasons(answer)
    if reasons:
        st.markdown("**Flash reranker reasons**\n\n" + "\n".join(f"- **{t}**: {r}" for t, r in reasons))


def _budget_section(answer: Answer, index: int) -> None:
    st.subheader("Context budget")
    reports = answer.budget_reports
    if not reports:
        st.caption("No LLM call was made (nothing relevant was found).")
        return
    pick = default_call(reports)
    if len(reports) > 1:
        pick = st.selectbox(
            "LLM call",
            range(len(reports)),
            index=pick,
            format_func=lambda i: f"call {i + 1} of {len(reports)}" + (" (answer)" if i == len(reports) - 1 else ""),
            key=f"budget_call_{index}",
        )
    report = reports[pick]
    view = budget_view(report, answer)
    cols = st.columns(4)
    cols[0].metric("Compressor", view.compressor)
    cols[1].metric("Prompt tokens", f"{view.tokens_after}", delta=view.tokens_after - view.tokens_before)
    cols[2].metric("Window used", f"{view.used_pct:.0f}%")
    cols[3].metric("Window (tokens)", f"{view.context_window:,}")
    st.markdown(f"**Path:** {view.path}")
    for note in view.notes:
        st.warning(note)
    if view.left_out:
        st.caption(
            "Left out by the relevance floor (scored under the sidebar's share of the best article's score): "
            + "; ".join(view.left_out)
        )
    # theme=None: Streamlit's theme hides the limit lines of the layered gauge.
    st.altair_chart(window_gauge(report), theme=None, width="stretch")
    rows = token_rows(report)
    if rows:
        st.altair_chart(tokens_chart(rows), width="stretch")
    elif "under_trigger" in report.path:
        st.caption(
            f"Under the trigger ({report.tokens_before} ≤ {report.trigger_tokens} tokens): every article went "
            "in whole, nothing was compressed."
        )
    else:
        st.caption("This call's prompt held no article.")


# --- ingest ----------------------------------------------------------------------------------------
def ingest_page(engine: Any) -> None:
    """Upload JSONL / Markdown files and ingest them with progress; bad files get a clear message."""
    st.title("Ingest files")
    st.markdown(
        'JSONL: one article per line, `{"id", "title", "url", "text"}`. Markdown/HTML: one article per file. '
        "Re-ingesting is idempotent: unchanged articles cost nothing."
    )
    files = st.file_uploader(f"Files ({', '.join(ACCEPTED_SUFFIXES)})", accept_multiple_files=True, key="uploads")
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
