from voiceagent.conversation.text import ClauseSplitter


def feed(text: str, step: int = 3, **kw) -> list[str]:
    splitter = ClauseSplitter(**kw)
    out = []
    for i in range(0, len(text), step):
        out += splitter.push(text[i : i + step])
    return out + splitter.flush()


def test_sentences_are_released_as_they_complete():
    splitter = ClauseSplitter()
    assert splitter.push("Hello there") == []
    assert splitter.push(". How are") == ["Hello there."]
    assert splitter.push(" you?") == []  # no whitespace yet after "?": could be "?!" or a URL
    assert splitter.flush() == ["How are you?"]


def test_long_runs_split_at_commas_then_anywhere():
    text = "I checked your account, and the last three payments, all to the same merchant, look unusual to me"
    clauses = feed(text, soft_limit=30, first_soft_limit=30)
    assert clauses[0] == "I checked your account,"
    assert " ".join(clauses) == text
    monologue = "word " * 80
    assert all(len(c) <= 160 for c in feed(monologue))


def test_numbers_and_abbreviations_do_not_cut_mid_token():
    expected = ["Your balance is 1,234.56 dollars.", "Thanks."]
    assert feed("Your balance is 1,234.56 dollars. Thanks.") == expected


def test_empty_and_punctuation_only():
    assert feed("") == []
    assert feed(". . .") == []


def test_the_first_clause_is_cut_at_its_first_comma_so_its_audio_comes_sooner():
    reply = "I'm the offline demo assistant, so I only understand a few things, like hello or goodbye."
    assert feed(reply) == [
        "I'm the offline demo assistant,",
        "so I only understand a few things, like hello or goodbye.",
    ]
    two = "I'm running offline, so I can't check the time. Is there anything else?"
    assert feed(two, step=len(two)) == [
        "I'm running offline,",
        "so I can't check the time.",
        "Is there anything else?",
    ]
    assert feed("I'm doing well, thanks for asking.") == ["I'm doing well,", "thanks for asking."]
    assert feed("Sure, one moment. I'll check.") == [
        "Sure, one moment.",
        "I'll check.",
    ]  # "Sure," is too short


def test_after_the_first_clause_commas_wait_for_the_soft_limit():
    text = "Okay, well. I checked your account, and it looks fine to me today"
    assert feed(text) == ["Okay, well.", "I checked your account, and it looks fine to me today"]
