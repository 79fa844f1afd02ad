"""The recogniser's vocabulary hint, built at startup from the scenarios' own text.

Whisper reads a prompt as "what was said before" and favours its words and spellings: given the
banking walk's phrases it hears "my card was stolen" where it otherwise wrote "my card won't go
then". The hint is made of what the dialog files listen for, so it follows the scenarios:

- the caller phrases quoted in each dialog file's comments (the walk: "i lost my card"),
- the literal words and phrases of every regex the rules match (``stolen|theft|robbed``),
- names a caller may say (the demo profiles' first and last names), and the digits.

Whisper keeps the last 224 tokens of a prompt, the recogniser the last 200
(``whisper_worker.Recognizer.prompt_ids``): the caller phrases come last so they are the ones
always kept. The built-in scenarios' hint is 203 tokens, so its first rule word ("stole", also
said by "my card was stolen") is cut. Every token costs: the decoder reads the prompt before
each utterance and carries it in each hypothesis's cache. A 7.5 s pause decode of 2 s of speech
(beam 5, 2026-11-30 machine): 44 ms encoding, and 109 ms decoding with this hint against 41 ms
without (its prefill ~40 ms, the longer cache ~26 ms over the decode's ~10 steps). It is worth
it: bench_offline_speech's corpus decoded as a pause is (7.5 s, 100 ms of silence after) is heard
at an in-domain WER of 0.041 / 0.081 (full band / phone) with it, 0.062 / 0.116 without. Cut to
the phrases and digits (91 tokens, ~40 ms less a decode) the phone band's rose to 0.093; a hint
without the inflected duplicates ("charges" beside "charge") was as good as this one, no better
(0.038 / 0.079 at 15 s).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Final

import yaml

__all__ = ["MAX_WORDS", "build_prompt", "dialog_phrases"]

MAX_WORDS: Final = 140
MAX_NAMES: Final = 24
DIGITS: Final = "zero one two three four five six seven eight nine"
_QUOTED = re.compile(r'"([a-z][a-z \']{2,80})"')
_LITERAL = re.compile(r"^[a-z][a-z ']*[a-z]$")
_CHAR_CLASS = re.compile(r"\[([a-z])[a-z]*\]")  # recogni[sz]e -> recognise
_REGEX_NOISE = re.compile(r"\\[bBsSdDwW]|\(\?P<\w+>|\(\?[:!=]|[\^$()?*+.\[\]{}]|\[a-z[^\]]*\]")


def _regex_literals(pattern: str) -> list[str]:
    """Plain words and phrases of a rule regex: ``\\b(lost|cant find)\\b`` -> [lost, cant find]."""
    out = []
    for piece in _REGEX_NOISE.sub("|", _CHAR_CLASS.sub(r"\1", pattern)).split("|"):
        piece = " ".join(piece.split())
        if _LITERAL.match(piece) and len(piece) > 2:
            out.append(piece)
    return out


def _matches(node: object) -> Iterable[str]:
    """Every ``match`` regex and named pattern anywhere in a dialog file."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "match" or key == "patterns":
                values = value.values() if isinstance(value, dict) else value
                for item in [values] if isinstance(values, str) else values:
                    if isinstance(item, str) and not item.startswith("@"):
                        yield item
            else:
                yield from _matches(value)
    elif isinstance(node, list):
        for item in node:
            yield from _matches(item)


def dialog_phrases(path: Path) -> tuple[list[str], list[str]]:
    """(caller phrases quoted in the comments, words and phrases the rules match) of a dialog file."""
    text = path.read_text(encoding="utf-8")
    comments = "\n".join(line for line in text.splitlines() if line.lstrip().startswith("#"))
    unique = {m.strip().replace("'", ""): m.strip() for m in reversed(_QUOTED.findall(comments))}
    phrases = list(reversed(unique.values()))
    words: list[str] = []
    for pattern in _matches(yaml.safe_load(text) or {}):
        words.extend(_regex_literals(pattern))
    return phrases, list(dict.fromkeys(words))


def build_prompt(dialog_dir: Path, names: Iterable[str] = (), max_words: int = MAX_WORDS) -> str:
    """The hint for every scenario under ``dialog_dir``: names, digits, rule words, caller phrases."""
    phrases: list[str] = []
    words: list[str] = []
    for path in sorted(dialog_dir.glob("*.yaml")):
        found, matched = dialog_phrases(path)
        phrases.extend(found)
        words.extend(matched)
    phrases = list(dict.fromkeys(phrases))
    said = set(" ".join(phrases).split())
    words = [w for w in dict.fromkeys(words) if not set(w.split()) <= said]
    budget = max_words - sum(len(p.split()) for p in phrases) - len(DIGITS.split())
    head: list[str] = []
    for item in [*list(dict.fromkeys(names))[:MAX_NAMES], *words]:
        if budget - len(item.split()) < 0:
            break
        head.append(item)
        budget -= len(item.split())
    sentences = [p[0].upper() + p[1:] + "." for p in phrases]
    return " ".join([", ".join(head) + ".", DIGITS.capitalize() + ".", *sentences]).strip()
