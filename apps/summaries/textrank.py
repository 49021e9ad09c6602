"""The local summarizer: an extractive summary by TextRank, in the language of the text where it can tell.

The text is a message's own words (apps.search.chunks.own_text: no quoted reply, no signature), cut into
sentences. Each sentence becomes the set of its words' stems (Snowball, from `PyStemmer`), stop words
left out (the lists of `stop-words`), both in the language the text's stop words point to. Two sentences are
alike by the stems they share, over the logs of their lengths (Mihalcea & Tarau, 2004); PageRank over that graph
ranks them, and the best that fit SUMMARY_MAX_CHARS are returned in the text's own order. Nothing is downloaded:
both packages carry their data, and neither has dependencies.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from typing import Any

import numpy as np
import Stemmer
import stop_words

from apps.search.chunks import own_text

# the languages both packages know, by the name both use
LANGUAGES = (
    "arabic", "catalan", "czech", "danish", "dutch", "english", "finnish", "french", "german", "greek", "hindi",
    "hungarian", "indonesian", "italian", "norwegian", "persian", "polish", "portuguese", "romanian", "russian",
    "spanish", "swedish", "turkish",
)  # fmt: skip
# the words looked at to tell the language, and the share of them that must be the language's stop words
_SAMPLE_WORDS = 400
_MIN_SHARE = 0.12
_DAMPING = 0.85
_ITERATIONS = 60
_TOLERANCE = 1e-6
# a sentence ranked below this share of the mean is left out even when it would fit
_ASIDE_SHARE = 0.5
# a sentence ends at . ! ? … (and their CJK forms) before a space, or at a blank line; a line break inside a
# paragraph ends one too when the line is short (a list, a greeting, an address block)
_SENTENCE_END = re.compile("(?<=[.!?\u2026\u3002\uff01\uff1f])\\s+")
_PARAGRAPH = re.compile(r"\n\s*\n")
_SHORT_LINE = 60
_WORD = re.compile(r"\w+", re.UNICODE)
ELLIPSIS = "…"


@cache
def version() -> str:
    """What the local summarizer is, for the cache's key: the method and the packages it stands on (read once per
    process: reading a package's metadata parses its files, which cost every call that shows a summary ~1 ms)."""
    return f"textrank-1/PyStemmer@{metadata.version('PyStemmer')}/stop-words@{metadata.version('stop-words')}"


@cache
def _stop_words(code: str) -> frozenset[str]:
    return frozenset(word.lower() for word in stop_words.get_stop_words(code))


@cache
def _stemmer(code: str) -> Any:
    return Stemmer.Stemmer(code)


@cache
def _languages_of_words() -> dict[str, tuple[str, ...]]:
    """Each stop word of any language, with the languages it is a stop word of (built once)."""
    found: dict[str, list[str]] = {}
    for code in LANGUAGES:
        for word in _stop_words(code):
            found.setdefault(word, []).append(code)
    return {word: tuple(codes) for word, codes in found.items()}


def language_of(words: list[str]) -> str | None:
    """The language whose stop words are the largest share of the text's first words, when that share is
    large enough to tell; None otherwise (then no stemming and no stop words)."""
    sample = [w.lower() for w in words[:_SAMPLE_WORDS]]
    if len(sample) < 3:
        return None
    index = _languages_of_words()
    hits = Counter(code for w in sample for code in index.get(w, ()))
    if not hits:
        return None
    # the most hits; a tie goes to the language listed first
    best = max(LANGUAGES, key=lambda code: hits.get(code, 0))
    return best if hits[best] >= max(2, _MIN_SHARE * len(sample)) else None


def sentences(text: str) -> list[str]:
    """The text's sentences, each on one line."""
    found: list[str] = []
    for paragraph in _PARAGRAPH.split(text):
        lines = [line.strip() for line in paragraph.splitlines() if line.strip()]
        if not lines:
            continue
        # a paragraph of short lines is a list: each line stands alone
        pieces = lines if all(len(line) <= _SHORT_LINE for line in lines) and len(lines) > 1 else [" ".join(lines)]
        for piece in pieces:
            found.extend(s for s in (" ".join(s.split()) for s in _SENTENCE_END.split(piece)) if s and not _aside(s))
    return found


def _aside(sentence: str) -> bool:
    """A greeting, a sign-off or a name on its own ("Hi team,", "Thanks,", "Ann"): no sentence of the text."""
    return sentence.endswith(",") or (len(sentence.split()) <= 3 and sentence[-1] not in ".!?\u2026")


def terms(sentence_list: list[str], language: str | None) -> list[set[str]]:
    """Each sentence's stems, stop words out (all its lower-cased words when the language is unknown)."""
    stop = _stop_words(language) if language else frozenset()
    stem = _stemmer(language).stemWords if language else (lambda words: words)
    out = []
    for sentence in sentence_list:
        words = [w for w in (w.lower() for w in _WORD.findall(sentence)) if w not in stop and not w.isdigit()]
        out.append(set(stem(words)))
    return out


def rank(sentence_terms: list[set[str]]) -> np.ndarray:
    """TextRank scores of the sentences (PageRank over the similarity graph), summing to 1. The random jump
    favours earlier sentences (1/(1+position)), as mail tends to say its point first."""
    n = len(sentence_terms)
    if n == 0:
        return np.zeros(0)
    vocabulary: dict[str, int] = {}
    rows, cols = [], []
    for i, bag in enumerate(sentence_terms):
        for term in bag:
            rows.append(i)
            cols.append(vocabulary.setdefault(term, len(vocabulary)))
    incidence = np.zeros((n, max(len(vocabulary), 1)), dtype=np.float32)
    incidence[rows, cols] = 1.0
    overlap = incidence @ incidence.T
    sizes = np.log1p(np.array([len(bag) for bag in sentence_terms], dtype=np.float64))
    denominator = sizes[:, None] + sizes[None, :]
    similarity = np.divide(overlap, denominator, out=np.zeros((n, n)), where=denominator > 0)
    np.fill_diagonal(similarity, 0.0)
    out_weight = similarity.sum(axis=1)
    # a sentence sharing nothing links to every other alike (so the walk never stops there)
    transition = np.where(out_weight[:, None] > 0, similarity / np.where(out_weight > 0, out_weight, 1)[:, None], 1 / n)
    jump = 1.0 / (1.0 + np.arange(n))
    jump /= jump.sum()
    scores = np.full(n, 1.0 / n)
    for _ in range(_ITERATIONS):
        updated = (1 - _DAMPING) * jump + _DAMPING * (transition.T @ scores)
        if np.abs(updated - scores).sum() < _TOLERANCE:
            scores = updated
            break
        scores = updated
    total = scores.sum()
    return np.asarray(scores / total if total > 0 else scores)


@dataclass(frozen=True)
class Extract:
    text: str
    truncated: bool  # cut at the limit (its best sentence alone was longer), ending in an ellipsis
    language: str | None


def choose(sentence_list: list[str], scores: np.ndarray, limit: int) -> tuple[str, bool]:
    """The best-ranked sentences that fit `limit` characters together, in their own order (ties: the earlier),
    and whether it had to be cut (the best sentence alone is longer)."""
    order = sorted(range(len(sentence_list)), key=lambda i: (-round(float(scores[i]), 9), i))
    # a sentence that shares (almost) nothing with the rest is an aside: never chosen only because it is short
    floor = _ASIDE_SHARE / len(sentence_list)
    chosen: list[int] = []
    used = 0
    for i in order:
        if chosen and scores[i] < floor:
            break
        if any(sentence_list[j] == sentence_list[i] for j in chosen):
            continue  # a sentence said twice is summarized once
        extra = len(sentence_list[i]) + (1 if chosen else 0)
        if used + extra <= limit:
            chosen.append(i)
            used += extra
    if not chosen:  # even the best sentence is too long: its start
        return sentence_list[order[0]][: limit - 1].rstrip() + ELLIPSIS, True
    return " ".join(sentence_list[i] for i in sorted(chosen)), False


def summarize_text(body: str, limit: int) -> Extract:
    """A message body's extractive summary of at most `limit` characters."""
    return summarize_own_text(own_text(body), limit)


def summarize_own_text(text: str, limit: int) -> Extract:
    """The extractive summary of text already rid of quotes and signatures (a thread's messages, joined)."""
    sentence_list = sentences(text)
    flat = " ".join(sentence_list)
    language = language_of(_WORD.findall(flat))
    if len(flat) <= limit:
        return Extract(flat, False, language)
    summary, was_cut = choose(sentence_list, rank(terms(sentence_list, language)), limit)
    return Extract(summary, was_cut, language)
