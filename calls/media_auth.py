"""The ACS media stream's provider authentication: the bearer JWT of the stream's upgrade request.

Apart from the codec (:mod:`calls.media`) because it is a different job with its own failure
modes: a key set fetched over the network (cached per URL and process), RS256 only, and reasons
that are safe to log and to send as the close reason (they never contain the token).
"""

from __future__ import annotations

import asyncio

import jwt

ISSUER = "https://acscallautomation.communication.azure.com"
MAX_TOKEN_CHARS = 16384
TOKEN_DEADLINE_S = 10.0

_jwks_clients: dict[str, jwt.PyJWKClient] = {}


def _jwks_client(url: str) -> jwt.PyJWKClient:
    """One caching key client per URL and process: the keys are fetched once an hour, not per call."""
    client = _jwks_clients.get(url)
    if client is None:
        client = _jwks_clients[url] = jwt.PyJWKClient(url, cache_keys=True, lifespan=3600, timeout=5)
    return client


def _verify(token: str, audience: str, jwks_url: str) -> None:
    """Blocking (the key fetch uses urllib): run in a thread."""
    key = _jwks_client(jwks_url).get_signing_key_from_jwt(token)
    jwt.decode(
        token,
        key.key,
        algorithms=["RS256"],
        audience=audience,
        issuer=ISSUER,
        leeway=60,
        options={"require": ["exp", "iss", "aud"]},
    )


async def verify_media_token(authorization: str | None, audience: str, jwks_url: str) -> str | None:
    """Check the provider's ``Authorization: Bearer <JWT>``; None when valid, else a reason that is
    safe to log and to send as the close reason (it never contains the token)."""
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return "unauthorized: Authorization: Bearer <JWT> required"
    if len(token) > MAX_TOKEN_CHARS:
        return "unauthorized: bearer token too long"
    try:
        header = jwt.get_unverified_header(token)
    except jwt.InvalidTokenError:
        return "unauthorized: malformed bearer token"
    if header.get("alg") != "RS256":
        return "unauthorized: bearer token must be signed with RS256"
    try:
        async with asyncio.timeout(TOKEN_DEADLINE_S):
            await asyncio.to_thread(_verify, token, audience, jwks_url)
    except TimeoutError:
        return "unauthorized: signing keys unavailable (timeout)"
    except jwt.PyJWKClientConnectionError:
        return "unauthorized: signing keys unavailable"
    except jwt.PyJWKClientError:
        return "unauthorized: no signing key matches the token"
    except jwt.ExpiredSignatureError:
        return "unauthorized: bearer token expired"
    except jwt.InvalidAudienceError:
        return "unauthorized: bearer token has the wrong audience"
    except jwt.InvalidIssuerError:
        return "unauthorized: bearer token has the wrong issuer"
    except jwt.InvalidTokenError as exc:
        return f"unauthorized: invalid bearer token ({type(exc).__name__})"
    return None
