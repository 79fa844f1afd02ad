"""Turn-taking settings and the small judgements made with them: is that an interruption, a
backchannel, the end of the caller's turn?

Global defaults come from configuration (``MIN_INTERRUPTION_MS``, ``ENDPOINTING_MAX_MS``,
``FILLER_AFTER_MS``, ``REPROMPT_AFTER_S``, ``MAX_REPROMPTS``, ``MAX_CONVERSATION_S``, ...; the
README's "Turn-taking" section); an agent's definition may override any of them in its
``turn_taking`` section (:class:`TurnTakingSpec`, every field ``None`` = the global value) and add
its own lines (fillers, the re-prompt, the goodbyes). :func:`resolve` merges the two into the
concrete :class:`TurnTaking` a conversation reads.

Why a lexical end-of-turn rule and a word list for backchannels: both must decide within a frame,
offline, for every conversation of the process. The peers do the same at their cheapest setting
(LiveKit's min/max endpointing delay, Pipecat's backchannel filter); a caller whose last words
are an unfinished clause or part of a number being read gets the maximum wait, everyone else the
minimum.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, fields, replace

__all__ = [
    "BACKCHANNELS",
    "BACKGROUND_MARGIN_DB",
    "DEFAULT_FILLERS",
    "DEFAULT_GOODBYE",
    "DEFAULT_REPROMPT",
    "DEFAULT_TIME_LIMIT_LINE",
    "TurnTaking",
    "TurnTakingSpec",
    "endpoint_ms",
    "is_backchannel",
    "resolve",
]

# Speech over the agent this far below the caller's own level (learnt from their turns) is voices
# in the room behind them (babble, a TV), not the caller taking the turn.
BACKGROUND_MARGIN_DB = 8.0

DEFAULT_FILLERS: tuple[str, ...] = ("One moment while I check that.", "Still checking, thanks for waiting.")
DEFAULT_REPROMPT = "Are you still there?"
DEFAULT_GOODBYE = "I haven't heard from you, so I'll end the call now. Goodbye."
DEFAULT_TIME_LIMIT_LINE = "We've reached the time limit for this call. Thank you for calling, goodbye."


@dataclass(frozen=True)
class TurnTakingSpec:
    """An agent's overrides (``None`` = the global setting)."""

    min_interruption_ms: int | None = None
    endpointing_max_ms: int | None = None
    filler_after_ms: int | None = None
    fillers: tuple[str, ...] | None = None
    reprompt_after_s: float | None = None
    max_reprompts: int | None = None
    reprompt: str | None = None
    goodbye: str | None = None
    max_conversation_s: float | None = None
    time_limit_line: str | None = None


@dataclass(frozen=True)
class TurnTaking:
    """The concrete settings one conversation works with (0 disables a timer)."""

    min_interruption_ms: int = 300  # speech over the agent shorter than this does not stop it
    endpointing_min_ms: int = 500  # silence that ends a complete-sounding turn (VAD_SILENCE_TIMEOUT)
    endpointing_max_ms: int = 1600  # silence that ends an unfinished clause or a number being read
    echo_gate_db: float = 10.0  # caller audio this far below the agent's own recent audio is echo
    filler_after_ms: int = 700  # a tool still running after this: the agent says a filler
    fillers: tuple[str, ...] = DEFAULT_FILLERS
    reprompt_after_s: float = 15.0  # caller silent this long after the agent spoke: re-prompt
    max_reprompts: int = 2  # re-prompts in a row without an answer before the polite goodbye
    reprompt: str = DEFAULT_REPROMPT
    goodbye: str = DEFAULT_GOODBYE
    max_conversation_s: float = 3600.0  # a conversation's bound; the agent says time_limit_line
    time_limit_line: str = DEFAULT_TIME_LIMIT_LINE


def resolve(spec: TurnTakingSpec | None, defaults: TurnTaking, silence_ms: int | None = None) -> TurnTaking:
    """The global ``defaults`` with the agent's overrides; ``silence_ms`` (the agent's
    ``vad_silence_timeout_ms``) replaces the minimum endpointing wait. The maximum is never below
    the minimum."""
    merged = defaults
    if spec is not None:
        changes = {f.name: getattr(spec, f.name) for f in fields(spec) if getattr(spec, f.name) is not None}
        if changes:
            merged = replace(merged, **changes)
    if silence_ms:
        merged = replace(merged, endpointing_min_ms=int(silence_ms))
    if merged.endpointing_max_ms < merged.endpointing_min_ms:
        merged = replace(merged, endpointing_max_ms=merged.endpointing_min_ms)
    return merged


# --- backchannels -------------------------------------------------------------------------------
BACKCHANNELS: frozenset[str] = frozenset(
    {
        "uh-huh", "uh huh", "uhuh", "mm-hmm", "mm hmm", "mhm", "mmhmm", "mm", "hmm", "mmm", "hm",
        "okay", "ok", "o.k", "yeah", "yea", "yep", "yes", "right", "sure", "i see", "got it",
        "alright", "all right", "uh", "um", "ah", "oh", "huh", "aha", "ah ha", "yeah yeah",
        "okay okay", "right right", "mm-hm", "mm hm", "uh-hum", "uh-uh", "mm-mm", "thanks", "thank you",
        "thank you very much", "thanks a lot", "great", "cool", "perfect", "good", "uh uh", "mm mm",
    }
)  # fmt: skip
# What Whisper writes for a cough, a click or breath it cannot place (its well-known hallucinations
# on non-speech): over the agent, noise like any other.
NOISE_TRANSCRIPTS: frozenset[str] = frozenset(
    {"you", "bye", "bye bye", "bye-bye", "thanks for watching", "thank you for watching", "so", "oh"}
)
_WORDS = re.compile(r"[a-z0-9']+(?:-[a-z0-9']+)*")


def is_backchannel(text: str) -> bool:
    """True when ``text`` (a transcript of speech over the agent) is only acknowledgement or noise:
    "uh-huh", "okay", "yeah right", "mm hmm", or what Whisper writes for a cough ("Bye bye.") -
    the caller is listening, not taking the turn."""
    words = _WORDS.findall(text.lower())
    if not words or len(words) > 4:
        return not words
    phrase = " ".join(words)
    if phrase in BACKCHANNELS or phrase in NOISE_TRANSCRIPTS:
        return True
    return all(word in BACKCHANNELS for word in words)


MAX_WORDS_PER_VOICED_S = 8.0  # fast speech is ~4-6 words per second of voiced audio
LOOPED_WORD_RUN = 4  # the same word this many times in a row: the decoder looping on a sound


def is_hallucination(text: str, voiced_ms: int, max_words_per_s: float = MAX_WORDS_PER_VOICED_S) -> bool:
    """True when ``text`` is more than the voiced audio under it can hold: a recogniser writing
    words for a cough, clicks or a keyboard ("I'm just click click click click ..."): a word looped
    :data:`LOOPED_WORD_RUN` times in a row, or more words than ``max_words_per_s`` per second of
    the speech frames the VAD heard (one word is always possible). Used for sound over the agent,
    where noise is likelier than a caller's words (the agent goes on), and, stricter, before a
    turn model may outweigh the recogniser's doubt (voiceagent.conversation.end_of_turn)."""
    words = _WORDS.findall(text.lower())
    if not words:
        return False
    run = longest = 1
    for before, word in itertools.pairwise(words):
        run = run + 1 if word == before else 1
        longest = max(longest, run)
    if longest >= LOOPED_WORD_RUN:
        return True
    return len(words) > max(1.0, max_words_per_s * voiced_ms / 1000.0)


# Whisper's own "these words are a guess" level: what it writes for a cough, a keyboard or voices in
# the room ("Thank you.", "That's it.", "One more time.") scores -0.8..-2.5; a caller's words over
# the agent -0.1..-0.55, 8 kHz included (bench_turn_taking's corpus)
GUESS_LOGPROB = -1.0


# words a sentence needs for a sure model to outweigh the recogniser's doubt on a telephone band
# (is_whole_question, is_whole_statement): a caller's pause comes after an opening ("my card number
# is", "i was born on", "can you check"), which at 8 kHz comes back as a short confident sentence
# ("Can you kick?", "I went born long.", "No, no, I'm married."): on bench_end_of_turn_rule (seeds
# 16 and 17, 80 a category) no fragment a sure model would end was a question of 4 words or more or
# a statement of 5 or more; 3-word questions and 4-word statements ended 1 and 2 more early
QUESTION_MIN_WORDS = 4
STATEMENT_MIN_WORDS = 5


def is_whole_question(text: str) -> bool:
    """A question of at least :data:`QUESTION_MIN_WORDS` words ("Can you freeze my card please?"):
    on a telephone band, where the recogniser's doubt otherwise outweighs the model, such a turn
    is ended by a sure model too. Its fragments came back as short questions ("Can you kick?" for
    "can you check ..."), or as open ones the lexical rule holds ("Can you tell me?")."""
    return text.rstrip().endswith("?") and len(_WORDS.findall(text.lower())) >= QUESTION_MIN_WORDS


def is_whole_statement(text: str) -> bool:
    """Another sentence of at least :data:`STATEMENT_MIN_WORDS` words ("No thank you, that's
    all."): on a telephone band a sure model ends it too, when the recogniser is not guessing
    (:mod:`voiceagent.conversation.end_of_turn`). "i was born on ..." came back shorter ("I went
    born long.")."""
    return not text.rstrip().endswith("?") and len(_WORDS.findall(text.lower())) >= STATEMENT_MIN_WORDS


def opens_with_possessive(text: str) -> bool:
    """Does ``text`` open with a possessive ("My card is done.")? The shape of the recogniser's
    mishearings of a subject phrase the caller paused after (see :data:`SUBJECT_PHRASE_MAX_WORDS`)."""
    words = _WORDS.findall(text.lower())
    return bool(words) and words[0] in _POSSESSIVES


def is_guess(logprob: float | None) -> bool:
    """Is a transcript of this confidence (mean token log-probability; None: not known) a guess
    at noise? Used, like :func:`is_hallucination`, only for sound over the agent: it goes on."""
    return logprob is not None and logprob < GUESS_LOGPROB


# --- end of turn --------------------------------------------------------------------------------
# Whisper's mean token log-probability: clear sentences score -0.1..-0.4 (8 kHz included), a
# fragment cut at a pause or a misheard one -0.5..-1.2 ("My opinion." for "my pin is", "Big." for
# "six", "My card." for "my card number is" on a phone line). From SURE_LOGPROB down to
# UNSURE_LOGPROB the silence that ends a complete-sounding turn grows from the minimum to the maximum.
SURE_LOGPROB = -0.3
UNSURE_LOGPROB = -0.8
_UNFINISHED_ENDINGS: frozenset[str] = frozenset(
    {
        # conjunctions and prepositions: the clause goes on
        "and", "or", "but", "so", "because", "if", "then", "that", "which", "who", "when", "where",
        "to", "for", "of", "in", "on", "at", "from", "with", "about", "by", "into", "like", "as",
        # articles, possessives, copulas and hesitations: the object is still to come
        "a", "an", "the", "my", "our", "your", "his", "her", "their", "its", "this", "these",
        "is", "are", "was", "were", "be", "am", "it's", "i'm", "i", "we", "um", "uh", "er", "erm",
        "hmm", "well", "than",
    }
)  # fmt: skip
# A phrase of a few words that opens with a possessive and stops there ("My card.", "My opinion.")
# is the subject of a sentence still being said ("my card number is ...", "my pin is ...", "my date
# of birth is ...") more often than a whole turn: callers pause there to look the rest up, and on a
# phone line the recogniser drops the trailing "is" and writes the fragment as a confident sentence
# ("my pin is" -> "My opinion." at -0.25 a token). It waits the maximum; a caller whose whole answer
# it was ("My savings.") waits that long for the reply, the price of not talking over the others.
_POSSESSIVES: frozenset[str] = frozenset({"my", "our", "your", "his", "her", "their"})
SUBJECT_PHRASE_MAX_WORDS = 3
# A question that stops on a verb still wanting its object ("Can you tell me?", "Do you know?",
# "Can you check?") is a caller who paused after the opening of "can you tell me ... what my balance
# is": Whisper writes the opening as a whole question, at -0.1 a token, and Smart Turn calls it
# complete as often as not on synthetic voices. Offline, 336 decodes of such openings (7 voices, 2
# rates, both bands): "Can you tell me?" x28, "Do you know?" x21, "Can you check?" x16, and the
# fused rule ended 44 % (full band) / 25 % (phone) of them within 1.1 s. As a statement ("I know.",
# "Let me check.") these endings are whole.
OPEN_QUESTION_ENDINGS: tuple[tuple[str, ...], ...] = (
    ("tell", "me"), ("tell", "us"), ("show", "me"), ("give", "me"), ("send", "me"), ("check",),
    ("know",), ("find",), ("find", "out"), ("look", "up"), ("explain",),
)  # fmt: skip
# A question's opening at 8 kHz also comes back as a statement ("Do you know." for "do you know when
# the branch opens") or with its verb misheard and alone ("Can you kick?", "Can you care?" for "can
# you check my savings account"): on bench_end_of_turn_rule's seed 19 (not the seeds the rules were
# fitted on) these ended 5 of the phone band's 20 question openings early, and 2 on seed 16. A
# sentence that opens as a question (an auxiliary, then its subject) is one whatever its
# punctuation; "<modal> you <verb>?" with nothing after the verb waits unless the verb asks for
# nothing more ("Can you help?").
_QUESTION_AUXILIARIES: frozenset[str] = frozenset({"do", "does", "did", "can", "could", "would", "will"})
_QUESTION_SUBJECTS: frozenset[str] = frozenset({"you", "i", "we"})
_MODALS: frozenset[str] = frozenset({"can", "could", "would", "will"})
_WHOLE_BARE_VERBS: frozenset[str] = frozenset(
    {"help", "hear", "repeat", "wait", "hold", "stop", "speak", "talk", "continue", "hurry", "see", "try"}
)
_NUMBER_WORDS: frozenset[str] = frozenset(
    {
        "zero", "oh", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
        "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
        "nineteen", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
        "hundred", "thousand", "double", "triple",
    }
)  # fmt: skip


# A question that ends on a copula whose subject sits between a wh-word and it closes an embedded
# question ("Can you tell me what my balance is?", "Do you know where it is?"): whole, though "is"
# ends an unfinished clause everywhere else. Before this, all 15 such turns of bench_end_of_turn_rule
# (seeds 16 and 17, 80 a category) waited the maximum. "What is?" (the opening of "what is the fee
# ..."), "What time is?" and "... where is?" have no subject there, and still wait.
_WH_WORDS: frozenset[str] = frozenset(
    {"what", "where", "who", "whom", "whose", "which", "how", "when", "why"}
)
_COPULAS: frozenset[str] = frozenset({"is", "are", "was", "were", "am"})
_PRONOUNS: frozenset[str] = frozenset({"it", "he", "she", "they", "we", "you", "i", "that", "this", "one"})


def closes_embedded_question(text: str, words: list[str]) -> bool:
    """Does ``text`` (its lower-case ``words``) end a question on a copula after the subject of an
    embedded wh-clause ("... what my balance is?")?"""
    if not text.rstrip().endswith("?") or len(words) < 3 or words[-1] not in _COPULAS:
        return False
    wh = max((i for i, word in enumerate(words[:-1]) if word in _WH_WORDS), default=-1)
    subject = words[wh + 1 : -1]
    return wh >= 0 and (len(subject) >= 2 or (len(subject) == 1 and subject[0] in _PRONOUNS))


def is_open_question(text: str, words: list[str]) -> bool:
    """Is ``text`` (its lower-case ``words``) a question stopped on a verb still wanting its object
    ("Can you tell me?", "Do you know.", "Can you kick?")?"""
    opens_as_one = len(words) >= 2 and words[0] in _QUESTION_AUXILIARIES and words[1] in _QUESTION_SUBJECTS
    if not (text.rstrip().endswith("?") or opens_as_one):
        return False
    if any(tuple(words[-len(e) :]) == e for e in OPEN_QUESTION_ENDINGS):
        return True
    return len(words) == 3 and words[0] in _MODALS and words[1] == "you" and words[2] not in _WHOLE_BARE_VERBS


def lacks_its_verb(words: list[str]) -> bool:
    """Are these (lower-case) words an auxiliary and its negation alone ("Do not.", "Can not.")?
    With neither subject nor verb the caller is still going ("do not ... cancel it"), or Whisper
    wrote a question's opening so: 16 kHz "do you know ... when the branch opens" came back as "Do
    not." at -0.97 with Smart Turn at 0.91-0.95 and ended early on bench_end_of_turn_rule seed 16
    and bench_turn_taking seed 17 (both VADs, every run of the last two sessions)."""
    return len(words) == 2 and words[0] in _QUESTION_AUXILIARIES and words[1] == "not"


def ends_unfinished(words: list[str]) -> bool:
    """Do these (lower-case) words stop on a clause still going on ("... is", "... to", "I") or
    inside a number being read?"""
    last = words[-1] if words else ""
    return last in _UNFINISHED_ENDINGS or is_number(last)


def is_number(word: str) -> bool:
    """Is this (lower-case) word a number said or written ("seven", "7")?"""
    return word.isdigit() or word in _NUMBER_WORDS


def endpoint_ms(text: str, settings: TurnTaking, logprob: float | None = None) -> int:
    """The silence (ms) that ends the caller's turn after saying ``text`` (the latest transcript):
    the maximum when it stops on an unfinished clause ("my card number is"), a hesitation, inside
    a number being read ("4 2 7"), is only a possessive's short phrase ("My card."), a question
    stopped on a verb still wanting its object ("Can you tell me?") or a negation without its verb
    ("Do not."), else the minimum.
    ``logprob``: the recogniser's mean log-probability per token of ``text``, when it says. The
    less sure it is, the less its words can tell that the turn is complete ("six" comes
    back as "Big." on a phone line): from :data:`SURE_LOGPROB` to :data:`UNSURE_LOGPROB` the
    silence grows to the maximum."""
    words = _WORDS.findall(text.lower())
    low, high = settings.endpointing_min_ms, settings.endpointing_max_ms
    if not words:
        return low
    if ends_unfinished(words) and not closes_embedded_question(text, words):
        return high
    if text.rstrip().endswith((",", "-", "...", "…")):
        return high
    if len(words) <= SUBJECT_PHRASE_MAX_WORDS and words[0] in _POSSESSIVES:
        return high
    if is_open_question(text, words) or lacks_its_verb(words):
        return high
    if logprob is None or logprob >= SURE_LOGPROB or high <= low:
        return low
    unsure = min(1.0, (SURE_LOGPROB - logprob) / (SURE_LOGPROB - UNSURE_LOGPROB))
    return low + round((high - low) * unsure)
