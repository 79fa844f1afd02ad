"""AudioHook upgrade authentication: TLS, X-API-KEY, and the HMAC request signature, on a fixed clock."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from audiohook_client_auth import COMPONENTS, as_scope_headers, signed_headers

from bridge.auth import AuthResult, authenticate, header_map

NOW = 1_700_000_000
PATH = "/api/v1/contactcenter/stream"
HOST = "bridge.example.com"
ORG = "d7934305-0972-4844-938e-9060eef73d05"
SESSION = "e160e428-53e2-487c-977d-96989bf5c99d"
CORRELATION = "corr-7c1e"
API_KEY = "SGVsbG8sIEkgYW0gdGhlIEFQSSBrZXkh"
SECRET_BYTES = b"TXlTdXBlclNlY3JldEtleVRlbGxOby0xMjM0NTY3ODk"
SECRET = base64.b64encode(SECRET_BYTES).decode()


def sign(**overrides) -> dict[str, str]:
    args = dict(
        path=PATH,
        host=HOST,
        organization_id=ORG,
        session_id=SESSION,
        correlation_id=CORRELATION,
        api_key=API_KEY,
        client_secret_b64=SECRET,
        created=NOW,
    )
    args.update(overrides)
    return signed_headers(**args)


def check(
    raw: dict[str, str] | list[tuple[bytes, bytes]],
    *,
    path: str = PATH,
    query: str = "",
    scheme: str = "wss",
    api_key: str | None = API_KEY,
    secret: str | None = SECRET,
    require_tls: bool = False,
    trust: bool = False,
    now: float = NOW,
    host: str | None = HOST,
) -> AuthResult:
    scope = raw if isinstance(raw, list) else as_scope_headers(raw, host)
    return authenticate(
        header_map(scope),
        path=path,
        query_string=query,
        scheme=scheme,
        api_key=api_key,
        client_secret=secret,
        require_tls=require_tls,
        trust_forwarded_proto=trust,
        now=now,
    )


def refused(result: AuthResult, reason: str) -> None:
    assert result == AuthResult(False, reason)


# --- valid requests ----------------------------------------------------------------------------------


def test_valid_signature_is_accepted():
    assert check(sign()) == AuthResult(True, "")


def test_known_answer_written_out_from_the_spec():
    """Independent of every helper: the base exactly as the protocol notes describe it."""
    params = (
        '("@request-target" "@authority" "audiohook-organization-id" "audiohook-session-id" '
        '"audiohook-correlation-id" "x-api-key");keyid="' + API_KEY + '";nonce="VGhpc0lzQVVuaXF1ZU5vbmNl";'
        f'alg="hmac-sha256";created={NOW};expires={NOW + 5}'
    )
    base = (
        f'"@request-target": {PATH}?a=1&b=2\n'
        f'"@authority": {HOST}\n'
        f'"audiohook-organization-id": {ORG}\n'
        f'"audiohook-session-id": {SESSION}\n'
        f'"audiohook-correlation-id": {CORRELATION}\n'
        f'"x-api-key": {API_KEY}\n'
        f'"@signature-params": {params}'
    )
    mac = base64.b64encode(hmac.new(SECRET_BYTES, base.encode(), hashlib.sha256).digest()).decode()
    scope = [
        (b"host", HOST.encode()),
        (b"Audiohook-Organization-Id", ORG.encode()),
        (b"Audiohook-Session-Id", SESSION.encode()),
        (b"Audiohook-Correlation-Id", CORRELATION.encode()),
        (b"X-API-KEY", API_KEY.encode()),
        (b"Signature-Input", b"sig1=" + params.encode()),
        (b"Signature", b"sig1=:" + mac.encode() + b":"),
    ]
    assert check(scope, query="a=1&b=2").ok
    refused(check(scope, query=""), "signature does not verify")  # the query is part of the target


def test_query_string_is_part_of_the_request_target():
    assert check(sign(query="x=1"), query="x=1").ok
    refused(check(sign(query="x=1"), query="x=2"), "signature does not verify")


def test_component_order_chosen_by_the_client_is_the_base_order():
    reordered = ["x-api-key", "@authority", "audiohook-session-id", "@request-target"]
    reordered += ["audiohook-correlation-id", "audiohook-organization-id"]
    assert check(sign(components=reordered)).ok


def test_other_label_is_accepted_when_both_fields_use_it():
    assert check(sign(label="audiohook")).ok


def test_expires_is_optional():
    assert check(sign(expires_in=None)).ok


def test_time_window_edges():
    assert check(sign(created=NOW + 5)).ok  # 5 s in the future
    assert check(sign(created=NOW - 12, expires_in=20)).ok  # 10 s old plus the 2 s skew


def test_secret_that_is_not_base64_is_used_as_raw_bytes():
    raw = "not base64! just a passphrase"
    headers = sign(client_secret_b64=base64.b64encode(raw.encode()).decode())
    assert check(headers, secret=raw).ok


# --- without a secret, with or without a key -----------------------------------------------------------


def test_unsigned_accepted_without_secret():
    unsigned = {"X-API-KEY": API_KEY, "Audiohook-Session-Id": SESSION}
    assert check(unsigned, secret=None).ok
    assert check({}, api_key=None, secret=None).ok
    assert check({}, api_key="", secret="").ok  # empty settings count as unset


def test_key_without_secret_needs_no_signature():
    assert check({"X-API-KEY": API_KEY}, secret=None).ok


def test_unsigned_refused_with_secret():
    refused(check({"X-API-KEY": API_KEY}), "missing signature")
    only_input = {k: v for k, v in sign().items() if k != "Signature"}
    refused(check(only_input), "missing signature")


def test_api_key_missing_or_wrong():
    refused(check({}, secret=None), "missing X-API-KEY")
    refused(check({"X-API-KEY": "nope"}, secret=None), "X-API-KEY is not valid")
    refused(check({"X-API-KEY": API_KEY + "x"}, secret=None), "X-API-KEY is not valid")
    refused(check({"X-API-KEY": "clé-ü"}, secret=None), "X-API-KEY is not valid")  # non-ASCII: no TypeError


def test_api_key_checked_before_signature():
    refused(check(sign(api_key="other")), "X-API-KEY is not valid")


def test_signed_with_another_key_when_no_api_key_configured():
    """No CONTACTCENTER_API_KEY: any key, but keyid must still name it and the HMAC must verify."""
    assert check(sign(api_key="whatever-key"), api_key=None).ok


# --- TLS ---------------------------------------------------------------------------------------------


def test_tls_required():
    refused(check(sign(), scheme="ws", require_tls=True), "TLS required")
    assert check(sign(), scheme="wss", require_tls=True).ok
    assert check(sign(), scheme="ws", require_tls=False).ok


def test_forwarded_proto_only_with_trusted_proxy():
    forwarded = {**sign(), "X-Forwarded-Proto": "https"}
    refused(check(forwarded, scheme="ws", require_tls=True), "TLS required")
    assert check(forwarded, scheme="ws", require_tls=True, trust=True).ok
    assert check({**sign(), "X-Forwarded-Proto": "HTTPS, http"}, scheme="ws", require_tls=True, trust=True).ok
    for proto in ("http", "http, https", ""):
        headers = {**sign(), "X-Forwarded-Proto": proto}
        refused(check(headers, scheme="ws", require_tls=True, trust=True), "TLS required")
    refused(check(sign(), scheme="ws", require_tls=True, trust=True), "TLS required")


def test_tls_checked_first():
    refused(check({}, scheme="ws", require_tls=True), "TLS required")


# --- signature failures ------------------------------------------------------------------------------


SIX = list(COMPONENTS)  # the six components AudioHook signs


@pytest.mark.parametrize("missing", SIX)
def test_every_component_must_be_covered(missing):
    components = [c for c in SIX if c != missing]
    refused(check(sign(components=components)), f"signature-input does not cover {missing}")


def test_expired():
    refused(check(sign(created=NOW - 8, expires_in=5)), "signature expired")  # expired 3 s ago


def test_created_in_the_future():
    refused(check(sign(created=NOW + 6)), "signature created in the future")


def test_too_old():
    refused(check(sign(created=NOW - 13, expires_in=60)), "signature too old")


def test_nonce_too_short():
    refused(check(sign(nonce="c2hvcnQtbm9uY2U=")), "nonce too short")
    assert check(sign(nonce="A" * 22)).ok


def test_unsupported_alg():
    refused(check(sign(alg="hmac-sha1")), "unsupported alg")
    refused(check(sign(alg="HMAC-SHA256")), "unsupported alg")


def test_keyid_must_match_api_key_header():
    refused(check(sign(keyid="someone-else")), "keyid does not match X-API-KEY")


def test_wrong_secret_does_not_verify():
    other = base64.b64encode(b"another secret entirely").decode()
    refused(check(sign(client_secret_b64=other)), "signature does not verify")


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("Audiohook-Organization-Id", "00000000-0000-0000-0000-000000000000"),
        ("Audiohook-Session-Id", "5b0e8a0f-1111-4a6b-9f5e-000000000000"),
        ("Audiohook-Correlation-Id", "other"),
    ],
)
def test_tampered_header_does_not_verify(header, value):
    refused(check({**sign(), header: value}), "signature does not verify")


def test_tampered_target_or_host_does_not_verify():
    refused(check(sign(), path="/api/v1/contactcenter/other"), "signature does not verify")
    refused(check(sign(), host="evil.example.com"), "signature does not verify")


def test_missing_host():
    refused(check(sign(), host=None), "missing Host header")


def test_tampered_signature_params_do_not_verify():
    headers = sign()
    headers["Signature-Input"] = headers["Signature-Input"].replace(f"created={NOW}", f"created={NOW - 1}")
    refused(check(headers), "signature does not verify")


def test_signature_label_must_match():
    headers = sign()
    headers["Signature"] = headers["Signature"].replace("sig1=", "sig2=", 1)
    refused(check(headers), "Signature label does not match Signature-Input")


def test_replayed_signature_is_refused_after_the_window():
    headers = sign()
    assert check(headers, now=NOW + 4).ok
    refused(check(headers, now=NOW + 30), "signature expired")
    refused(check(sign(expires_in=None), now=NOW + 30), "signature too old")


# --- malformed input: refused, never raised ------------------------------------------------------------


def with_input(value: str) -> dict[str, str]:
    return {**sign(), "Signature-Input": value}


def params_of(headers: dict[str, str]) -> str:
    return headers["Signature-Input"].split("=", 1)[1]


@pytest.mark.parametrize(
    "mangle",
    [
        lambda si: si.replace('"', ""),  # missing quotes
        lambda si: si.replace("(", "", 1),
        lambda si: si.replace(")", "", 1),
        lambda si: "sig1",
        lambda si: "=" + si,
        lambda si: si + ", sig2=()",  # a second signature
        lambda si: si + " garbage",
        lambda si: si.replace('"x-api-key"', '"x-api-key";sf'),  # component parameters
        lambda si: si.replace('"x-api-key"', '"x-api-key" "x-api-key"'),  # duplicate component
        lambda si: si.replace('alg="', 'alg="é'),  # non-ASCII
        lambda si: si + ';alg="hmac-sha256"',  # duplicate parameter
        lambda si: si + ";expires=1.5",
        lambda si: si + ";x=12345678901234567",
        lambda si: si + ";",
        lambda si: "",
    ],
)
def test_malformed_signature_input(mangle):
    result = check(with_input(mangle(sign()["Signature-Input"])))
    assert not result.ok
    assert result.reason in {"malformed Signature-Input", "missing signature"}


def test_huge_signature_input():
    huge = sign()["Signature-Input"] + ";" + ";".join(f"p{i}=1" for i in range(20_000))
    assert len(huge) > 100_000
    refused(check(with_input(huge)), "malformed Signature-Input")
    refused(check(with_input('sig1=("' + "a" * 100_000)), "malformed Signature-Input")


@pytest.mark.parametrize(
    "value",
    [
        "sig1=abc",
        "sig1=:not base64!:",
        "sig1=:QUJD",
        "sig1=:QQ:",
        "sig1=:A:, sig1=:A:",
        "\x00",
        "x" * 100_000,
    ],
)
def test_malformed_signature(value):
    refused(check({**sign(), "Signature": value}), "malformed Signature")


def test_param_types_are_checked():
    base = sign()
    refused(
        check(with_input(base["Signature-Input"].replace(f"created={NOW}", "created=?1"))), "missing created"
    )
    refused(
        check(with_input(base["Signature-Input"].replace(f"created={NOW}", f'created="{NOW}"'))),
        "missing created",
    )
    refused(check(with_input(base["Signature-Input"].replace(";nonce=", ";nonce=?1;n="))), "nonce too short")
    expires_as_string = base["Signature-Input"].replace(f"expires={NOW + 5}", f'expires="{NOW + 5}"')
    refused(check(with_input(expires_as_string)), "malformed Signature-Input")


def test_unsupported_and_absent_extra_components():
    extra = params_of(sign()).replace("(", '("@method" ', 1)
    refused(check(with_input("sig1=" + extra)), "unsupported signature component")
    extra = params_of(sign()).replace("(", '("x-not-sent" ', 1)
    refused(check(with_input("sig1=" + extra)), "signed header is missing")


def test_covered_header_absent():
    headers = sign()
    del headers["Audiohook-Correlation-Id"]
    refused(check(headers), "missing audiohook-correlation-id header")


@pytest.mark.parametrize(
    "scope",
    [
        [(b"x-api-key", "clé".encode()), (b"signature-input", b"\xff\xfe"), (b"signature", b"\x80")],
        [
            (b"x-api-key", API_KEY.encode()),
            (b"signature-input", "sig1=(\u00e9)".encode()),
            (b"signature", b""),
        ],
        [(b"x-api-key", API_KEY.encode()), (b"signature", b"sig1=::"), (b"signature-input", b"sig1=()")],
        [
            (b"x-api-key", API_KEY.encode()),
            (b"signature", b"sig1=::"),
            (b"signature-input", b"sig1=();created=1"),
        ],
    ],
)
def test_garbage_never_raises(scope):
    result = check(scope, host=None)
    assert isinstance(result, AuthResult)
    assert not result.ok and result.reason


# --- reasons are safe -----------------------------------------------------------------------------------


def test_reasons_never_contain_key_secret_or_signature():
    good = sign()
    signature = good["Signature"].split(":")[1]
    cases = [
        check({"X-API-KEY": "wrong"}, secret=None),
        check({}, secret=None),
        check(sign(client_secret_b64=base64.b64encode(b"x" * 32).decode())),
        check(sign(keyid="someone-else")),
        check(sign(alg="none")),
        check(sign(created=NOW - 100)),
        check(with_input("garbage " + API_KEY)),
        check({**good, "Signature": "sig9=:" + signature + ":"}),
        check({**good, "Signature": good["Signature"] + "junk"}),
        check(sign(), scheme="ws", require_tls=True),
    ]
    for result in cases:
        assert not result.ok
        for secret in (API_KEY, SECRET, SECRET_BYTES.decode(), signature, "someone-else"):
            assert secret not in result.reason


# --- header_map ------------------------------------------------------------------------------------------


def test_header_map_lower_cases_and_keeps_the_first_duplicate():
    headers = header_map(
        [
            (b"X-API-KEY", b"first"),
            (b"x-api-key", b"second"),
            (b"Host", b" bridge.example.com "),
            (b"X-Latin", "caf\u00e9".encode("latin-1")),
        ]
    )
    assert headers == {"x-api-key": "first", "host": "bridge.example.com", "x-latin": "caf\u00e9"}
    assert header_map([]) == {}


def test_duplicate_signed_header_cannot_replace_the_signed_value():
    headers = sign()
    scope = as_scope_headers(headers, HOST) + [(b"audiohook-organization-id", b"other-org")]
    assert check(scope).ok
    assert header_map(scope)["audiohook-organization-id"] == ORG
