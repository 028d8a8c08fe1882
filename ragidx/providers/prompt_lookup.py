"""Prompt-lookup decoding for the local model: tokens copied from the prompt are checked, not written one by one.

An answer from a help article often copies it ("Choose Insert - Table of Contents and Index - …"). When the last
few tokens written also occur in the prompt, the tokens that followed them there are a likely continuation: the
model reads them together with its own next token in one batch and keeps the longest run it picks itself
(llama-cpp-python's ``generate`` verifies each drafted token against the model's choice at that position). With
greedy decoding the text is the model's own, but from logits computed in a batch, which llama.cpp rounds
differently from a single token's: where two words are nearly tied the other can win, so some answers come out
worded differently (deterministically so).

It saves time only where a step of several tokens costs little more than a step of one (decoding bound by memory
bandwidth). On the 2-core machine of the benchmarks page decoding is bound by arithmetic (a step of 2 tokens costs
1.9 times one, ``benchmarks/decode_batch_cost.py``), so it is off by default.

llama-cpp-python's own ``draft_model`` support asks for ``logits_all``, which makes the server copy the logits of
every prompt token into a NumPy array (a vocabulary of floats per token: gigabytes for an 8K context) and slows
prompt reading. :func:`attach` instead gives the model a draft after it is loaded and computes the logits of every
token only for the short batches that hold a draft, never for the prompt.

:class:`PromptLookupDraft` also differs from ``LlamaPromptLookupDecoding``: it matches the longest suffix of at
least ``min_ngram`` tokens at its latest place in the context (the answer and the articles, not the first
occurrence in the instructions), and proposes nothing when there is no such match, so writing new words costs
nothing extra.

Example:
    >>> import numpy as np
    >>> draft = PromptLookupDraft(num_pred_tokens=3, min_ngram=2)
    >>> draft(np.array([5, 6, 7, 8, 9, 1, 5, 6], dtype=np.intc)).tolist()
    [7, 8, 9]
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["PromptLookupDraft", "attach"]


class PromptLookupDraft:
    """Proposes the tokens that followed the context's latest earlier occurrence of its last n-gram.

    Args:
        num_pred_tokens: most tokens proposed per step.
        max_ngram: longest suffix tried first.
        min_ngram: shortest suffix accepted (a single common token predicts badly).
    """

    def __init__(self, num_pred_tokens: int = 10, *, max_ngram: int = 4, min_ngram: int = 2) -> None:
        if num_pred_tokens < 1 or min_ngram < 1 or max_ngram < min_ngram:
            raise ValueError(
                f"prompt lookup needs num_pred_tokens >= 1 and 1 <= min_ngram <= max_ngram "
                f"(got {num_pred_tokens}, {min_ngram}, {max_ngram})"
            )
        self.num_pred_tokens = num_pred_tokens
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def __call__(self, input_ids: npt.NDArray[np.intc], /, **_: Any) -> npt.NDArray[np.intc]:
        ids = np.asarray(input_ids)
        length = ids.shape[0]
        for n in range(min(self.max_ngram, length - 1), self.min_ngram - 1, -1):
            suffix = ids[-n:]
            windows = np.lib.stride_tricks.sliding_window_view(ids[:-1], n)  # never the suffix matching itself
            starts = np.flatnonzero(np.all(windows == suffix, axis=1))
            for start in starts[::-1]:  # latest first
                follow = ids[start + n : start + n + self.num_pred_tokens]
                if follow.size:
                    return follow.astype(np.intc)
        return np.array([], dtype=np.intc)


def attach(llama: Any, draft: PromptLookupDraft) -> Any:
    """Give a loaded ``llama_cpp.Llama`` the ``draft``; returns it (the same object, changed in place).

    Its ``eval`` asks for every token's logits only on batches no longer than a draft plus one token (those the
    generation loop verifies); a prompt is read as before, its logits neither computed per token nor copied.
    """
    llama.draft_model = draft
    verify_batch = draft.num_pred_tokens + 1
    plain_eval = llama.eval

    def eval_with_draft(self: Any, tokens: Any) -> None:
        if not tokens or len(tokens) > verify_batch or self._logits_all:
            plain_eval(tokens)
            return
        self._ctx.kv_cache_seq_rm(-1, self.n_tokens, -1)
        n_past = self.n_tokens
        self._batch.set_batch(batch=tokens, n_past=n_past, logits_all=True)
        self._ctx.decode(self._batch)
        self.input_ids[n_past : n_past + len(tokens)] = tokens
        self.n_tokens += len(tokens)
        self._requires_eval = False

    llama.eval = types.MethodType(eval_with_draft, llama)
    return llama
