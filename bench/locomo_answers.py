"""How LoCoMo scores an answer, reproduced: token F1 with its own normalisation, per
category, plus two lenient readings (the gold answer contained; an abstention).

LoCoMo's evaluation (Maharana et al., ACL 2024; ``task_eval/evaluation.py`` of
https://github.com/snap-research/locomo) scores a reply against the gold answer by token
F1 after :func:`normalize_answer` (lower case, punctuation and commas removed, the
articles *a*, *an*, *the* and the word *and* removed, whitespace collapsed) and Porter
stemming (nltk's ``PorterStemmer``, as there):

* categories 2 (temporal), 3 (open-domain) and 4 (single-hop): :func:`f1_score` of the
  reply against the gold answer; for category 3 only the gold's first ``;``-separated part;
* category 1 (multi-hop): :func:`multi_f1` -- reply and gold split at commas, each gold
  part scored by its best-matching reply part, averaged;
* category 5 (adversarial, no answer exists): 1 when the reply says "no information
  available" or "not mentioned", else 0 (:func:`locomo_abstained`).

Our reader is a chat agent, not a prompt that asks for "a short phrase", so two lenient
readings go beside F1: :func:`contained` (every token of the normalised gold answer is in
the normalised reply, stemmed: a long reply that holds the answer) and :func:`abstained`
(the reply says, in any of the common ways, that it does not know).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from functools import lru_cache

from nltk.stem import PorterStemmer

__all__ = ["abstained", "contained", "f1_score", "locomo_abstained", "multi_f1",
           "normalize_answer", "score_answer"]

_STEMMER = PorterStemmer()
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_PUNCT = set(string.punctuation)
#: Ways a reply says it does not know (lower case, matched as substrings after
#: curly apostrophes became straight ones).
ABSTAIN_PHRASES = (
    "no information", "not mentioned", "don't know", "do not know", "don't have",
    "do not have", "not sure", "no record", "no mention", "not in my memory",
    "can't find", "cannot find", "couldn't find", "could not find", "doesn't say",
    "does not say", "not specified", "isn't mentioned", "wasn't mentioned", "no details",
    "don't recall", "do not recall", "not aware", "unknown", "no idea", "haven't told",
    "have not told", "didn't mention", "did not mention", "not stated")


def normalize_answer(text: str) -> str:
    """LoCoMo's normalisation: commas dropped, lower case, punctuation removed, the
    articles and *and* removed, whitespace collapsed."""
    text = str(text).replace(",", "").lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    return _STEMMER.stem(word)


def _tokens(text: str) -> list[str]:
    return [_stem(w) for w in normalize_answer(text).split()]


def f1_score(prediction: str, gold: str) -> float:
    """Token F1 of the stemmed, normalised texts (0.0 when they share no token)."""
    pred, truth = _tokens(prediction), _tokens(gold)
    same = sum((Counter(pred) & Counter(truth)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(truth)
    return 2 * precision * recall / (precision + recall)


def multi_f1(prediction: str, gold: str) -> float:
    """Category 1: the mean over the gold's comma-separated parts of the best
    :func:`f1_score` of any of the reply's comma-separated parts."""
    preds = [p.strip() for p in prediction.split(",")]
    golds = [g.strip() for g in gold.split(",")]
    return sum(max(f1_score(p, g) for p in preds) for g in golds) / len(golds)


def locomo_abstained(prediction: str) -> bool:
    """LoCoMo's category-5 check: the reply says "no information available" or "not
    mentioned"."""
    low = prediction.lower()
    return "no information available" in low or "not mentioned" in low


def abstained(prediction: str) -> bool:
    """The reply says it does not know, in any of :data:`ABSTAIN_PHRASES`."""
    low = prediction.lower().replace("\u2019", "'")
    return any(p in low for p in ABSTAIN_PHRASES)


def contained(prediction: str, gold: str) -> bool:
    """Every stemmed token of the normalised gold answer occurs in the reply's (a gold
    without tokens is never contained)."""
    truth = set(_tokens(gold))
    return bool(truth) and truth <= set(_tokens(prediction))


def score_answer(prediction: str, gold: str, category: int) -> dict[str, float | bool]:
    """``{"f1", "contained"}`` for categories 1-4 (LoCoMo's F1 rule for the category),
    ``{"f1", "abstained"}`` for category 5 (``f1`` = LoCoMo's 0/1 abstention check)."""
    if category == 5:
        return {"f1": float(locomo_abstained(prediction)), "abstained": abstained(prediction)}
    if category == 3:
        gold = gold.split(";")[0].strip()
    f1 = multi_f1(prediction, gold) if category == 1 else f1_score(prediction, gold)
    return {"f1": f1, "contained": contained(prediction, gold)}
