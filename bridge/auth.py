"""Authentication of the AudioHook v2 WebSocket upgrade (``protocols/audiohook-v2.md``, "Authentication").

Pure Python on plain values (no Django), so every rule is unit-testable with a fixed clock. The
consumer calls :func:`authenticate` with the request's headers (:func:`header_map`), path, query
string and scheme plus the two settings, and refuses the session when the result is not ``ok``.

Checks, in order (the first failure is the reason):

1. TLS, when ``require_tls`` (production): scope scheme ``wss``, or ``X-Forwarded-Proto: https``
   but only when ``trust_forwarded_proto`` says a TLS-terminating proxy is in front (any client
   can send that header otherwise).
2. ``X-API-KEY`` equals ``CONTACTCENTER_API_KEY`` when that is set (constant-time).
3. When ``CONTACTCENTER_CLIENT_SECRET`` is set, the HTTP message signature (RFC 9421 style) must
   verify: one signature in ``Signature-Input`` (any label; ``Signature`` must carry the same
   label), covering all of :data:`REQUIRED_COMPONENTS`, ``alg="hmac-sha256"``, ``keyid`` equal to
   ``X-API-KEY``, a nonce of at least :data:`MIN_NONCE_LEN` characters, ``created`` within
   [now - :data:`MAX_AGE_S` - :data:`CLOCK_SKEW_S`, now + :data:`MAX_FUTURE_S`], ``expires`` (if
   present) not before now - :data:`CLOCK_SKEW_S`, and the HMAC-SHA256 compared in constant time.
   Without a secret an unsigned request is fine (a signature sent anyway is not checked: there is
   nothing to check it with).

Settings that are empty strings count as not set. A client secret that is not valid base64 is
used as its raw UTF-8 bytes (operators paste secrets in both forms; a strict decode decides).

Reasons are short fixed texts (plus, for coverage and missing headers, a name from our own list):
they never echo the key, the secret, the signature or any other client-supplied value, so they are
safe to log and to send in the ``disconnect`` info. Malformed input never raises.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
import time
from dataclasses import dataclass
from hashlib import sha256

__all__ = [
    "CLOCK_SKEW_S",
    "MAX_AGE_S",
    "MAX_FUTURE_S",
    "MIN_NONCE_LEN",
    "REQUIRED_COMPONENTS",
    "AuthResult",
    "authenticate",
    "header_map",
]

REQUIRED_COMPONENTS = (
    "@request-target",
    "@authority",
    "audiohook-organization-id",
    "audiohook-session-id",
    "audiohook-correlation-id",
    "x-api-key",
)
ALG = "hmac-sha256"
MIN_NONCE_LEN = 22
MAX_FUTURE_S = 5  # `created` may be this far ahead of our clock (their clock runs fast)
MAX_AGE_S = 10  # a signature is good for this long after `created` (replay window) ...
CLOCK_SKEW_S = 2  # ... plus this, for a client clock running slow; also the grace on `expires`
MAX_SIGNATURE_FIELD = 4096  # longer Signature-Input / Signature values are refused unparsed

_DERIVED = {"@request-target", "@authority"}
_KEY = re.compile(r"[a-z*][a-z0-9_\-.*]*")
_STRING = re.compile(r'"((?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*)"')  # RFC 8941 sf-string
_INTEGER = re.compile(r"-?[0-9]{1,15}(?![0-9.])")
_TOKEN = re.compile(r"[A-Za-z*][!#$%&'*+\-.^_`|~0-9A-Za-z:/]*")
_BOOLEAN = re.compile(r"\?[01]")
_SIGNATURE_MEMBER = re.compile(r"([a-z*][a-z0-9_\-.*]*)=:([A-Za-z0-9+/]*={0,2}):(?:;.*)?")


@dataclass(frozen=True)
class AuthResult:
    ok: bool
    reason: str = ""  # short, safe to send to the client and to log: never a key, secret or signature


_OK = AuthResult(True)


class _Refused(Exception):
    """Internal: carries the reason out of the nested checks."""


@dataclass(frozen=True)
class _SignatureInput:
    label: str
    components: tuple[str, ...]
    params: dict[str, str | int | bool]
    params_text: str  # the member value exactly as sent: what "@signature-params" signs


def _text(value: bytes | str) -> str:
    return value.decode("latin-1") if isinstance(value, bytes | bytearray) else str(value)


def header_map(scope_headers: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """ASGI scope headers as ``{lower-case name: value}``: latin-1 (as HTTP is), surrounding
    whitespace trimmed (RFC 9421 canonical form), first of duplicate names kept (a second copy must
    not be able to replace the value that was signed or checked)."""
    headers: dict[str, str] = {}
    for item in scope_headers or ():
        try:
            name, value = item
        except (TypeError, ValueError):
            continue
        headers.setdefault(_text(name).strip().lower(), _text(value).strip())
    return headers


def _same(a: str, b: str) -> bool:
    """Constant-time equality for any text (compare_digest rejects non-ASCII str, bytes it takes)."""
    return hmac.compare_digest(a.encode("utf-8", "surrogatepass"), b.encode("utf-8", "surrogatepass"))


def _secret_bytes(secret: str) -> bytes:
    try:
        return base64.b64decode(secret, validate=True)
    except (binascii.Error, ValueError):
        return secret.encode("utf-8", "surrogatepass")


def _is_tls(headers: dict[str, str], scheme: str, trust_forwarded_proto: bool) -> bool:
    if scheme == "wss":
        return True
    if not trust_forwarded_proto:
        return False
    # As Django's SECURE_PROXY_SSL_HEADER: the first value is the one our proxy set.
    return headers.get("x-forwarded-proto", "").split(",", 1)[0].strip().lower() == "https"


def _bare_item(s: str, pos: int) -> tuple[str | int | bool, int]:
    """An RFC 8941 bare item at ``pos`` (string, integer, token or boolean) and the position after it."""
    if m := _STRING.match(s, pos):
        return re.sub(r"\\(.)", r"\1", m.group(1)), m.end()
    if m := _INTEGER.match(s, pos):
        return int(m.group()), m.end()
    if m := _BOOLEAN.match(s, pos):
        return m.group() == "?1", m.end()
    if m := _TOKEN.match(s, pos):
        return m.group(), m.end()
    raise _Refused("malformed Signature-Input")


def _parse_signature_input(value: str) -> _SignatureInput:
    """``label=("c1" "c2" ...);k=v;...``: exactly one signature, no component parameters."""
    malformed = _Refused("malformed Signature-Input")
    if len(value) > MAX_SIGNATURE_FIELD or not (m := _KEY.match(value)):
        raise malformed
    label, pos, n = m.group(), m.end(), len(value)
    if value[pos : pos + 2] != "=(":
        raise malformed
    start, pos = pos + 1, pos + 2
    components: list[str] = []
    while True:
        while pos < n and value[pos] == " ":
            pos += 1
        if pos >= n:
            raise malformed
        if value[pos] == ")":
            pos += 1
            break
        if not (m := _STRING.match(value, pos)):
            raise malformed
        components.append(re.sub(r"\\(.)", r"\1", m.group(1)))
        pos = m.end()
        if pos >= n or value[pos] not in " )":  # ";" would be a component parameter: not supported
            raise malformed
    params: dict[str, str | int | bool] = {}
    while pos < n and value[pos] == ";":
        pos += 1
        while pos < n and value[pos] == " ":
            pos += 1
        if not (m := _KEY.match(value, pos)) or m.group() in params:
            raise malformed
        key, pos = m.group(), m.end()
        if pos < n and value[pos] == "=":
            params[key], pos = _bare_item(value, pos + 1)
        else:
            params[key] = True
    if value[pos:].strip():  # a second signature, or trailing garbage
        raise malformed
    return _SignatureInput(label, tuple(components), params, value[start:pos])


def _parse_signature(value: str, label: str) -> bytes:
    """The byte sequence ``Signature`` carries for ``label`` (``label=:base64:``)."""
    if len(value) > MAX_SIGNATURE_FIELD:
        raise _Refused("malformed Signature")
    found: dict[str, str] = {}
    for member in value.split(","):
        m = _SIGNATURE_MEMBER.fullmatch(member.strip())
        if not m or m.group(1) in found:
            raise _Refused("malformed Signature")
        found[m.group(1)] = m.group(2)
    if label not in found:
        raise _Refused("Signature label does not match Signature-Input")
    try:
        return base64.b64decode(found[label], validate=True)
    except (binascii.Error, ValueError):
        raise _Refused("malformed Signature") from None


def _component_value(name: str, headers: dict[str, str], request_target: str) -> str:
    if name == "@request-target":
        return request_target
    if name == "@authority":
        if not headers.get("host"):
            raise _Refused("missing Host header")
        return headers["host"]
    if name.startswith("@") or name != name.lower() or not name:
        raise _Refused("unsupported signature component")
    if name not in headers:
        raise _Refused(
            f"missing {name} header" if name in REQUIRED_COMPONENTS else "signed header is missing"
        )
    return headers[name]


def _check_signature(headers: dict[str, str], request_target: str, secret: str, now: float) -> None:
    signature_input, signature_field = headers.get("signature-input"), headers.get("signature")
    if not signature_input or not signature_field:
        raise _Refused("missing signature")
    sig = _parse_signature_input(signature_input)
    signature = _parse_signature(signature_field, sig.label)

    for name in REQUIRED_COMPONENTS:
        if name not in sig.components:
            raise _Refused(f"signature-input does not cover {name}")
    if len(set(sig.components)) != len(sig.components):
        raise _Refused("malformed Signature-Input")
    lines = [f'"{name}": {_component_value(name, headers, request_target)}' for name in sig.components]

    params = sig.params
    if params.get("alg") != ALG:
        raise _Refused("unsupported alg")
    keyid = params.get("keyid")
    if not isinstance(keyid, str) or not _same(keyid, headers.get("x-api-key", "")):
        raise _Refused("keyid does not match X-API-KEY")
    nonce = params.get("nonce")
    if not isinstance(nonce, str) or len(nonce) < MIN_NONCE_LEN:
        raise _Refused("nonce too short")
    created, expires = params.get("created"), params.get("expires")
    if type(created) is not int:  # bool is an int subclass: `created` as ?1 is malformed too
        raise _Refused("missing created")
    if expires is not None and type(expires) is not int:
        raise _Refused("malformed Signature-Input")
    if expires is not None and expires < now - CLOCK_SKEW_S:
        raise _Refused("signature expired")
    if created > now + MAX_FUTURE_S:
        raise _Refused("signature created in the future")
    if created < now - MAX_AGE_S - CLOCK_SKEW_S:
        raise _Refused("signature too old")

    lines.append(f'"@signature-params": {sig.params_text}')
    base = "\n".join(lines).encode("utf-8", "surrogatepass")
    expected = hmac.new(_secret_bytes(secret), base, sha256).digest()
    if not hmac.compare_digest(expected, signature):
        raise _Refused("signature does not verify")


def authenticate(
    headers: dict[str, str],
    *,
    path: str,
    query_string: str,
    scheme: str,
    api_key: str | None,
    client_secret: str | None,
    require_tls: bool,
    trust_forwarded_proto: bool = False,
    now: float | None = None,
) -> AuthResult:
    """Decide whether an AudioHook upgrade request may open a session (see the module docstring).

    ``path`` and ``query_string`` are as received (``@request-target`` is what the client signed);
    ``now`` is for tests (default: ``time.time()``).
    """
    try:
        if require_tls and not _is_tls(headers, scheme, trust_forwarded_proto):
            return AuthResult(False, "TLS required")
        if api_key:
            sent = headers.get("x-api-key")
            if not sent:
                return AuthResult(False, "missing X-API-KEY")
            if not _same(sent, api_key):
                return AuthResult(False, "X-API-KEY is not valid")
        if client_secret:
            target = path + (f"?{query_string}" if query_string else "")
            _check_signature(headers, target, client_secret, time.time() if now is None else now)
    except _Refused as refused:
        return AuthResult(False, str(refused))
    except (ValueError, TypeError, UnicodeError, AttributeError):  # belt and braces: never raise
        return AuthResult(False, "malformed request")
    return _OK
