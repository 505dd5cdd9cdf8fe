"""Issue 14's changes one at a time: CPU per call of the old and the new code path, in-process (best of
5 repeats of thousands of calls). The whole effect on a server is `bench/run.py --issue14 --baseline DIR`.

    .venv/bin/python bench/levers.py
"""

import asyncio
import base64
import json
import tempfile
import time
import timeit
from pathlib import Path

import jwt
from in_process import temp_services  # bench/, beside this file

from grantd.client_address import client_address
from grantd.services import tokens as T
from grantd.services.authn import _peek


def t(f, n=5000):
    return min(timeit.repeat(f, number=n, repeat=5)) / n * 1e6


async def main():
    with tempfile.TemporaryDirectory() as tmp:
        services = await temp_services(Path(tmp), "x" * 32)
        tok = services.tokens
        grant = {
            "id": "d70e5148-ab1f-404a-9ec6-a62c7752996d",
            "requester": "bench-1@example.com",
            "grant_type": "always",
            "decided_by": "admin@example.com",
            "expires_at": None,
            "request": {
                "audience": "escapes",
                "target_host": "web-1",
                "command": ["systemctl", "restart", "nginx"],
                "cmd_hash": "SHA256:" + "a" * 43,
                "permissions": [],
            },
        }
        authz = await tok.mint_authz(grant)

        async def per_call(fn, n=3000):
            best = 1e9
            for _ in range(5):
                t0 = time.perf_counter()
                for _ in range(n):
                    await fn()
                best = min(best, (time.perf_counter() - t0) / n * 1e6)
            return best

        async def old_authz():
            claims = await tok.verify(authz, audience=None)  # full verification, as before the cache
            T.kind_of(claims)

        async def new_authz():
            await tok.verify_authz(authz)

        await tok.verify_authz(authz)
        print(
            f"AuthZ-JWT verification, full (before): {await per_call(old_authz):.1f} µs; remembered (after): {await per_call(new_authz):.1f} µs"
        )
        public = await services.keyring.verification_key(jwt.get_unverified_header(authz)["kid"])
        opts = {
            "require": ["exp", "iat", "iss", "sub"],
            "verify_aud": False,
            "verify_exp": False,
            "verify_iat": False,
            "verify_nbf": False,
        }

        def old_decode():
            jwt.decode(authz, public, algorithms=["EdDSA"], issuer=tok.issuer, options=opts)
            payload = authz.split(".")[1]
            json.loads(
                base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)),
                object_pairs_hook=T._refuse_duplicates,
            )

        def new_decode():
            T._STRICT_JWT.decode(authz, public, algorithms=["EdDSA"], issuer=tok.issuer, options=opts)

        print(
            f"JWT decode + duplicate check: PyJWT then a second parse (before) {t(old_decode, 2000):.1f} µs; one parse in _StrictPyJWT (after) {t(new_decode, 2000):.1f} µs"
        )
        ident = {"agent_id": "a1", "email": "bench-1@example.com", "key_generation": 1}
        itok, _ = await tok.mint_identity(ident)
        await tok.verify_identity(itok)
        print(
            f"access-token peek of an agent's identity token (before) {t(lambda: _peek(itok)):.2f} µs; remembered-identity check (after) {t(lambda: tok.remembers_identity(itok)):.2f} µs"
        )
        print(
            f"client_address without proxies (before, every request) {t(lambda: client_address('127.0.0.1', None, ())):.2f} µs; skipped (after) 0"
        )
        window = services.clock.now_ms() // 60_000 * 60_000

        async def count_verify():  # what [limits] verify_per_address adds to every verify: a counted write
            await services.store.rates.hit(
                "verify.address:127.0.0.1", window, 60_000, services.clock.now_ms()
            )

        print(
            f"rate-limit counter write per verify with [limits] on (not changed): {await per_call(count_verify, 1000):.1f} µs"
        )
        services.store.close()


asyncio.run(main())
