"""The telephony provider's media-stream credentials, for tests: RS256 JWTs signed here as ACS
signs them, and the public key served as a JWKS over HTTP (``TELEPHONY_MEDIA_JWKS_URL``)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

ISSUER = "https://acscallautomation.communication.azure.com"  # what the provider's tokens carry


class JwksIssuer:
    """Signs media-stream tokens for ``audience`` and serves the public key at :attr:`url`."""

    def __init__(self, audience: str, kid: str = "test-key") -> None:
        self.audience = audience
        self.kid = kid
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self._key.public_key()))
        body = json.dumps({"keys": [{**jwk, "kid": kid, "use": "sig", "alg": "RS256"}]}).encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/calling/keys"

    def token(self, ttl_s: int = 600) -> str:
        now = int(time.time())
        claims = {"iss": ISSUER, "aud": self.audience, "iat": now, "nbf": now - 5, "exp": now + ttl_s}
        return jwt.encode(claims, self._key, algorithm="RS256", headers={"kid": self.kid})

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> JwksIssuer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
