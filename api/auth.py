"""API keys (SPEC §2.3): from the environment, compared in constant time, stored as digests.

A caller is known by its key's id: the first 16 hex digits of the SHA-256 of the key. Only
that id is ever stored (as a job's owner); the key itself is never kept in clear, not even in
memory after start-up.
"""

from __future__ import annotations

import hashlib
import hmac

from fastapi import Request

from decide.api.errors import ApiError

PUBLIC_OWNER = "public"
WHERE_A_KEY_GOES = ("send 'Authorization: Bearer <key>'; decide's client and command line "
                    "read the key from DECIDE_API_KEY")
"""Said by every 401, so a caller who has a key learns where it goes."""


def key_id(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:16]


class Authenticator:
    def __init__(self, keys: list[str], admins: list[str] | None = None) -> None:
        self._digests = [hashlib.sha256(key.encode()).digest() for key in keys]
        unknown = [key_id(key) for key in admins or () if key not in keys]
        if unknown:
            raise ValueError("every admin key must also be an API key (DECIDE_API_KEYS); "
                             f"not the keys with ids {', '.join(unknown)}")
        self._admin_ids = {key_id(key) for key in admins or ()}

    @property
    def open(self) -> bool:
        return not self._digests

    def sees_everyone(self, owner: str) -> bool:
        """Whether ``owner`` may see every key's work (``/v1/status``): an admin key, or
        anyone when the API is open (every caller is then the one owner)."""
        return self.open or owner in self._admin_ids

    def owner_of(self, request: Request) -> str:
        """The caller's owner id; 401 when keys are configured and none of them matches."""
        if self.open:
            return PUBLIC_OWNER
        header = request.headers.get("authorization", "")
        scheme, _, key = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            key = request.headers.get("x-api-key", "")
        if not key.strip():
            raise ApiError(401, "authentication_error",
                           f"an API key is required: {WHERE_A_KEY_GOES}",
                           headers={"WWW-Authenticate": "Bearer"})
        presented = hashlib.sha256(key.strip().encode()).digest()
        matched = False
        for digest in self._digests:  # every digest compared: no early exit to time
            matched |= hmac.compare_digest(presented, digest)
        if not matched:
            raise ApiError(401, "authentication_error",
                           f"the API key is not one of this service's keys: {WHERE_A_KEY_GOES}",
                           headers={"WWW-Authenticate": "Bearer"})
        return key_id(key.strip())
