"""The client side of AudioHook authentication, for tests: headers signed the way a contact center signs.

Written from the protocol notes (``protocols/audiohook-v2.md``, "Authentication"), not from
``bridge.auth``, so tests that use it check the verifier rather than agree with it.

``signed_headers`` does not return ``Host``: the signature covers ``@authority``, so the request must
carry ``Host: <host>``. A real WebSocket client sends it from the URL; with Channels'
``WebsocketCommunicator`` add ``(b"host", host.encode())`` to the headers yourself.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time

COMPONENTS = (
    "@request-target",
    "@authority",
    "audiohook-organization-id",
    "audiohook-session-id",
    "audiohook-correlation-id",
    "x-api-key",
)


def sf_string(text: str) -> str:
    """An RFC 8941 sf-string: quoted, with backslash and quote escaped."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def signed_headers(
    *,
    path: str,
    query: str = "",
    host: str,
    organization_id: str,
    session_id: str,
    correlation_id: str,
    api_key: str,
    client_secret_b64: str,
    created: int | None = None,
    expires_in: int | None = 5,
    nonce: str | None = None,
    components: list[str] | tuple[str, ...] | None = None,
    label: str = "sig1",
    alg: str = "hmac-sha256",
    keyid: str | None = None,
) -> dict[str, str]:
    """Request headers (Audiohook-*, X-API-KEY, Signature-Input, Signature) for one upgrade request.

    ``created`` defaults to now; ``expires_in=None`` leaves ``expires`` out; ``components`` chooses
    the covered components and their order; ``label``, ``alg`` and ``keyid`` (default: the API key)
    exist so tests can sign requests the server must refuse.
    """
    headers = {
        "Audiohook-Organization-Id": organization_id,
        "Audiohook-Session-Id": session_id,
        "Audiohook-Correlation-Id": correlation_id,
        "X-API-KEY": api_key,
    }
    created = int(time.time()) if created is None else created
    nonce = base64.b64encode(secrets.token_bytes(18)).decode() if nonce is None else nonce
    covered = list(COMPONENTS if components is None else components)

    params = "(" + " ".join(f'"{name}"' for name in covered) + ")"
    params += f";keyid={sf_string(api_key if keyid is None else keyid)};nonce={sf_string(nonce)}"
    params += f';alg="{alg}";created={created}'
    if expires_in is not None:
        params += f";expires={created + expires_in}"

    values = {
        "@request-target": f"{path}?{query}" if query else path,
        "@authority": host,
        **{name.lower(): value for name, value in headers.items()},
    }
    base_lines = [f'"{name}": {values[name]}' for name in covered]
    base_lines.append(f'"@signature-params": {params}')
    mac = hmac.new(
        base64.b64decode(client_secret_b64), "\n".join(base_lines).encode(), hashlib.sha256
    ).digest()

    headers["Signature-Input"] = f"{label}={params}"
    headers["Signature"] = f"{label}=:{base64.b64encode(mac).decode()}:"
    return headers


def as_scope_headers(headers: dict[str, str], host: str | None = None) -> list[tuple[bytes, bytes]]:
    """The same headers as an ASGI scope list (latin-1), with ``Host`` first when given."""
    scope = [(b"host", host.encode("latin-1"))] if host is not None else []
    return scope + [
        (name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()
    ]
