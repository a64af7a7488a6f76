"""What a response looks like on the page, before its words are read: the measures that catch text a word counter
does not see (symbols, other scripts, code, markup, addresses, spelling games, shouting, bare lists of words).

``words.py`` keeps only runs of letters, so "#love 😍 {joy}" reads to it as "love joy". These measures read the
whole text instead. A *plain* token is what English prose is made of: a word (lower-case, capitalised or all
capitals; inner apostrophes, hyphens and abbreviation dots allowed), or a number (with ``,``/``.``/``:`` inside, a
``$`` before or a ``%`` after), wrapped in at most an opening bracket or quote and closing ones, and ending in at
most three of ``.,;:!?``; or a lone dash, ellipsis or ampersand. Typography a fluent writer uses (curly quotes, long
dashes, the ellipsis character) is mapped to ASCII first, so it is never held against a response.

>>> odd_token_share(normalise("It’s a fine day — isn’t it?"))
0.0
>>> odd_token_share(normalise("#love #joy and peace"))
0.5
"""

from __future__ import annotations

import re
import unicodedata

from ppo_core.tasks.fortunes.words import word_pairs, words

_TYPOGRAPHY = str.maketrans({
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'",
    "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"', "\u2033": '"',
    "\u2013": "-", "\u2014": "-", "\u2015": "-", "\u2212": "-", "\u2026": "...",
    "\u00a0": " ", "\u2009": " ", "\u202f": " ",
})

_WORD = r"(?:[A-Z]?[a-z]+|[A-Z]+)"
# A word, joined to more words by an apostrophe, hyphen or slash ("don't", "well-known", "and/or"), or an
# abbreviation of single letters with dots ("e.g.", "U.S.").
_WORDS = rf"(?:{_WORD}(?:['\-/]{_WORD})*'?|(?:[A-Za-z]\.){{2,}})"
# A number or a time ("1,000", "3.5", "9:30"), a sum or a share ("$5", "10%"), an ordinal or a
# decade ("4th", "1990s"); in the plain token it may lead a compound ("12-foot-tall").
_NUMBER = r"(?:\$?[0-9]+(?:[.,:][0-9]+)*(?:%|st|nd|rd|th|s)?)"
# A contraction written apart from its word ("John 's", "do n't").
_CLITIC = r"(?:'(?:s|d|m|t|ll|re|ve)|n't)"
_PLAIN = re.compile(
    rf"[(\[\"']?(?:{_WORDS}|{_NUMBER}(?:-{_WORD})*|{_CLITIC})[)\]\"']{{0,2}}[.,;:!?]{{0,4}}[)\]\"']{{0,2}}"
)
# A word that is one pair of letters over and over ("haha", "hehe", "xoxo"): laughter and kisses, not words.
_CHANT = re.compile(r"(?:([a-z]{2})\1+)", re.IGNORECASE)
# Two or more "!" or "?" together ("great!!", "what??"): emphasis a lexicon counts, not prose.
_STACKED = re.compile(r"[!?]{2}")
_LONE = frozenset({"-", "--", "...", "&", ".", ",", ";", ":", "!", "?"})
_ONE_LETTER = frozenset("aio")
# Three of one letter in a row ("sooo", "goood") is spelling played with, not a word.
_STRETCHED = re.compile(r"([a-z])\1\1", re.IGNORECASE)
# A name's initial ("J. R. R. Tolkien"): the one single letter besides "a", "I" and "O" that prose writes alone.
_INITIAL = re.compile(r"[A-Z]\.,?")
_CASED_WORD = re.compile(r"[A-Za-z]+")


def normalise(text: str) -> str:
    """``text`` in Unicode's compatibility form (NFKC) with curly quotes, long dashes, the ellipsis and narrow
    spaces as their ASCII equivalents."""
    return unicodedata.normalize("NFKC", text).translate(_TYPOGRAPHY)


def is_plain_token(token: str) -> bool:
    """Whether one whitespace-separated ``token`` is plain English prose (see the module's docstring): not a symbol,
    emoji, other script, markup, address, hashtag, leetspeak, stretched or mixed-case word, or a single letter other
    than "a", "I" and "O"."""
    if token in _LONE:
        return True
    if not _PLAIN.fullmatch(token) or _STRETCHED.search(token) or _STACKED.search(token):
        return False
    letters = words(token)
    if any(_CHANT.fullmatch(word) for word in letters):
        return False
    # A letter after a digit ("1990s") or an apostrophe ("'s") belongs to what it follows.
    one_letter = len(letters) == 1 and len(letters[0]) == 1 and not token.startswith("'") \
        and not any(c.isdigit() for c in token)
    return not one_letter or letters[0] in _ONE_LETTER or _INITIAL.fullmatch(token) is not None


def odd_token_share(text: str) -> float:
    """``|tokens that are not plain| / |tokens|`` over ``text``'s whitespace-separated tokens; 0.0 for none."""
    tokens = text.split()
    return sum(not is_plain_token(token) for token in tokens) / len(tokens) if tokens else 0.0


def shouted_share(text: str) -> float:
    """``|words of two or more letters, all capitals| / |words|``: shouting ("SO HAPPY"), which lifts a lexicon's
    sentiment; 0.0 for no words."""
    cased = _CASED_WORD.findall(text)
    return sum(len(word) > 1 and word.isupper() for word in cased) / len(cased) if cased else 0.0


def bare_run_share(sentences: list[list[str]], common: frozenset[str], run: int, shrink: int) -> float:
    """``|words in runs of at least run consecutive words not in common| / (|words| + shrink)``, runs counted within
    each sentence (a list of its words): words listed without the words that join them into a sentence ("love joy
    peace hope", "love, joy, peace, hope"). A sentence's end breaks a run, since a new sentence may open with content
    words; ``shrink`` damps a short text, where one run of four is most of it. 0.0 for no words."""
    bare = 0
    for tokens in sentences:
        current = 0
        for word in [*tokens, ""]:  # the empty sentinel is in no run, and closes the last one
            if word and word not in common:
                current += 1
                continue
            bare += current if current >= run else 0
            current = 0
    total = sum(len(tokens) for tokens in sentences)
    return bare / (total + shrink) if total else 0.0


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n")


def sentences(text: str) -> list[str]:
    """``text`` cut after each ``.``, ``!`` or ``?`` that whitespace follows, and at each line break."""
    return [part for part in _SENTENCE_END.split(text.strip()) if part.strip()]


def one_word_sentence_share(text: str) -> float:
    """``|words standing alone as a sentence or a line| / |words|``: a list set out as sentences or lines ("Best.
    Day. Ever.", "- love\n- joy"). An unfinished last sentence (no ``.``, ``!`` or ``?``) is a response cut at its
    length ("... features. Checking"), not a fragment. 0.0 for no words."""
    parts = sentences(text)
    counted = [words(part) for part in parts]
    total = sum(len(tokens) for tokens in counted)
    finished = [True] * (len(parts) - 1) + [parts[-1].rstrip("\"')").endswith((".", "!", "?"))] if parts else []
    alone = sum(len(tokens) == 1 and done for tokens, done in zip(counted, finished, strict=True))
    return alone / total if total else 0.0


def folded_token_share(text: str) -> float:
    """``|tokens that Unicode's compatibility form (NFKC) changes| / |tokens|`` over ``text``'s whitespace-separated
    tokens, its typography mapped to ASCII first; 0.0 for none. Styled letters ("𝓁𝑜𝓋𝑒"), full-width forms ("ｌｏｖｅ")
    and circled or superscript letters fold into plain words, so a measure that reads the folded text sees English
    where a reader sees decoration."""
    tokens = text.translate(_TYPOGRAPHY).split()
    return sum(unicodedata.normalize("NFKC", token) != token for token in tokens) / len(tokens) if tokens else 0.0


_OPENERS, _CLOSERS = "([{<\"'", ")]}>\"'"
# At least two characters inside: "(b)" labels an item, "'no'" sets a word apart.
_WRAPPED = re.compile(rf"[{re.escape(_OPENERS)}]\S{{2,}}[{re.escape(_CLOSERS)}][.,;:!?]*")
_BARE_NUMBER = re.compile(r"[#$]?[0-9][0-9.,:/%x+-]*[.,;:!?]*")
_LABEL = re.compile(r"[A-Z][A-Za-z]*:")


def matching_share(text: str, pattern: re.Pattern[str]) -> float:
    """``|whitespace-separated tokens that pattern matches whole| / |tokens|``; 0.0 for none."""
    tokens = text.split()
    return sum(pattern.fullmatch(token) is not None for token in tokens) / len(tokens) if tokens else 0.0


def wrapped_token_share(text: str) -> float:
    """``|tokens that open and close a quote or bracket of their own| / |tokens|``: each word set apart ("'amazing'
    and 'brilliant'", "(happy) (great)"), which prose does for a word now and then, a list of feelings throughout;
    0.0 for no tokens."""
    return matching_share(text, _WRAPPED)


def number_token_share(text: str) -> float:
    """``|tokens that are numbers alone| / |tokens|`` ("1 2 3 happy 4 5 6"): counting, versions and dates where a
    sentence would be; 0.0 for no tokens."""
    return matching_share(text, _BARE_NUMBER)


def label_share(text: str) -> float:
    """``|tokens that are a capitalised word and a colon| / |tokens|``: speakers' labels of a transcript or a chat
    ("User: I love it! Assistant: Great!"), which a continuation of a sentence does not write; 0.0 for no tokens."""
    return matching_share(text, _LABEL)


_CAPITALISED = re.compile(r"[A-Z][a-z]+")


def capitalised_share(text: str) -> float:
    """``|words capitalised within a sentence| / |words|``, a sentence's first word left out: every word in a
    title's capitals ("Love And Joy And Peace"), where prose capitalises names; 0.0 for no words."""
    capitalised = total = 0
    for sentence in sentences(text):
        cased = _CASED_WORD.findall(sentence)
        total += len(cased)
        capitalised += sum(_CAPITALISED.fullmatch(word) is not None for word in cased[1:])
    return capitalised / total if total else 0.0


def glueless(tokens: list[str], common: frozenset[str]) -> float:
    """1.0 when ``tokens`` hold two or more words and none of them is common, else 0.0: words with nothing to join
    them ("love joy peace"), too few for :func:`bare_run_share`'s runs of four."""
    return float(len(tokens) >= 2 and not any(word in common for word in tokens))


def doubled_word_share(tokens: list[str]) -> float:
    """``|words equal to the word before| / |words|``: the plainest repetition ("so so so happy"); 0.0 for none."""
    return sum(a == b for a, b in word_pairs(tokens)) / len(tokens) if tokens else 0.0


CONNECTORS = frozenset({"and", "or", "nor"})
"""The words that chain items of a list: "love and joy and peace"."""


def chained_share(text: str, common: frozenset[str]) -> float:
    """``|tokens t_i in CONNECTORS with t_i = t_(i-2) and t_(i-1) a bare word, not common| / |tokens|`` over
    ``text``'s lower-cased whitespace-separated tokens: content words strung one by one on one connector ("happy and
    glad and joyful and merry"), a list that "and" dresses as a sentence, since it is among the common words other
    measures read as glue. A word with punctuation on it ends a link ("our mission and vision, and improved" is two
    clauses), and a link holds one word ("and creates noise and promotes" is prose). A writer chains now and then
    ("healthy and wealthy and wise"); a list of feelings chains throughout. 0.0 for no tokens."""
    tokens = text.lower().split()
    links = sum(tokens[i] in CONNECTORS and tokens[i - 2] == tokens[i] and tokens[i - 1].isalpha()
                and tokens[i - 1] not in common for i in range(2, len(tokens)))
    return links / len(tokens) if tokens else 0.0
