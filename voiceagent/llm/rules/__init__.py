"""The offline chat provider: a deterministic dialog engine driven by ``fixtures/dialog/<scenario>.yaml``.

:class:`RulesChat` (``"offline-rules"``) makes the product usable with no language model at all. It
is stateless: everything it decides comes from the :class:`ChatRequest` (the OpenAI-format
``messages``, the offered ``tools``, ``agent``, ``scenario`` and ``memory``), exactly like a model
would see it. The same request always gives the same answer.

How a round is decided
----------------------
* The last message is a **user** message: the agent's ``rules`` are tried in order, then the
  file's ``defaults.rules``; the first rule whose ``match`` finds the caller's text, whose ``when``
  holds and whose tools are all offered in ``request.tools`` fires. None fires: ``fallback``.
* The last messages are **tool results** (the round after a tool call): from the newest result
  back, the first ``after_tool.<tool name>`` rule (agent's, then ``defaults``') that holds fires.
  None fires: silence after a handoff, else ``after_tool_fallback``. After a handoff the *new*
  agent's ``after_tool.<handoff tool>`` rules see the result, which is how a discrete handoff
  carries on.
* Anything else (an assistant message last, no user message): silence.

A firing rule streams its ``reply`` (several text chunks split at word boundaries, so clause-based
TTS streaming is exercised), then one chunk with its tool call(s), then ``done``.

Dialog file format (YAML)
-------------------------
::

    version: 1
    patterns:                 # optional named regexes: `match: "@lost"`, `said(patterns.lost)`
      lost: '\\b(lost|lose|missing)\\b'
    macros: |                 # optional Jinja {% macro %} definitions, usable in every template
      {% macro cards() %}...{% endmacro %}
    defaults:                 # optional; tried for every agent after the agent's own section
      rules: [...]
      after_tool: {...}
      fallback: "..."
      after_tool_fallback: "..."
    agents:
      <agent name>:
        rules:                # tried in order; the first that applies fires
          - match: '<regex>'  # or a list of regexes (any); omitted = always matches
            when: "<Jinja expression>"      # or {<dotted.path>: value, said: regex, not_said: regex}
            reply: "<Jinja template>"       # spoken text; may be empty
            tool:                           # optional: one call, or a list of calls
              name: <tool name>
              args: {<arg>: "<template>"}   # strings are templates; numbers/bools as they are;
                                            # lists render each item; {json: "<template>"} is
                                            # parsed as JSON; arguments rendering to "" are left out
        after_tool:
          <tool name>:        # one rule or a list of rules (first that holds fires; no `match`)
            - when: "result.verified"
              reply: "..."
              tool: {...}
        fallback: "<template>"            # no user rule fired
        after_tool_fallback: "<template>" # a tool result no rule handled (not after handoffs)

Regexes are searched (case-insensitive) in the *normalised* caller text: lowercase, accents
folded, apostrophes dropped ("that's" -> "thats"), other punctuation turned into spaces,
whitespace collapsed. Write patterns for simple spoken English, as the offline STT produces.

Names in templates and ``when`` expressions: ``text`` (normalised last caller utterance), ``raw``,
``digits`` (the digits spoken in it: "my code is four two one" -> "421"; of a keypad turn, the
digits typed), ``keypad`` (the digits typed when the turn is a keypad entry, ``"Keypad entry:
421"`` -> ``"421"``, else ``""``: rules that take digits take both), ``groups`` (named regex
captures), ``memory`` (``ChatRequest.memory``: ``caller_name``, ``caller_profile``,
``authenticated``...), ``result`` and ``tool`` (after_tool: the parsed JSON result and the tool
name), ``results`` (all results of the round by tool name), ``agent``, ``scenario``, ``patterns``,
``last_reply`` (the agent's previous spoken text), and the file's macros. Functions:

* ``said(regex)``: any caller utterance so far matches;
* ``find(regex)``: the newest matching utterance, its named groups plus ``match`` and
  ``utterance`` (``{}`` when none);
* ``last_result(tool)``: the newest parsed result of that tool in the conversation, including
  the ``"Earlier, tool <name> returned: <json>"`` system messages the engine replays from
  earlier turns;
* ``offered(tool)``; ``card(kind_or_last4)``: a card of ``memory.caller_profile``;
* ``chosen_card()``: the card the caller named ("credit", "debit", "ending in ...", its last four
  typed on the keypad) or their only card; ``pick(items)``: the item named by an ordinal in the
  utterance ("the second one").

Filters: ``digits``, ``spoken_date`` ("march third nineteen eighty five" -> "1985-03-03"),
``say_date`` ("2024-03-05" -> "March 5"), ``say_amount`` (-41.3 -> "41 dollars and 30 cents"),
``say_digits`` ("4242" -> "4 2 4 2"), ``say_chars`` ("FRD-1A" -> "F R D 1 A").

A scenario with no dialog file gets a small generic dialog (hello, transfer by agent name,
goodbye). Parsed files are cached and re-read when they change; :meth:`RulesChat.warm` loads and
validates every file and returns False if one is invalid.

Where it lives: :mod:`~.spoken` (spoken numbers, dates and the template filters),
:mod:`~.dialog` (a parsed file as data), :mod:`~.parser` (YAML -> dialog, validated),
:mod:`~.loader` (files, cache, the generic dialog), :mod:`~.history` (what a request says about the
conversation so far), :mod:`~.context` (the names templates see), :mod:`~.matcher` (which rule
fires) and :mod:`~.provider` (:class:`RulesChat`, the chat-provider face).
"""

from voiceagent.llm.rules.dialog import DialogError
from voiceagent.llm.rules.loader import DIALOG_DIR
from voiceagent.llm.rules.provider import RulesChat
from voiceagent.llm.rules.spoken import normalize, spoken_date, spoken_digits

__all__ = [
    "DIALOG_DIR",
    "DialogError",
    "RulesChat",
    "normalize",
    "spoken_date",
    "spoken_digits",
]
