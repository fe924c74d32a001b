"""Which argument names name a credential: the one definition the agent host (``ask``,
the hooks) and the cards use, so that a value under ``password``, ``GITHUB_TOKEN`` or
``apiKey`` is hidden wherever it is shown."""

from __future__ import annotations

import itertools
import re
from typing import Final

CREDENTIAL_WORDS: Final = frozenset({
    "password", "passwords", "passwd", "passphrase", "pwd", "pass", "token", "tokens",
    "secret", "secrets", "apikey",
    "authorization", "authorisation", "auth", "credential", "credentials", "cookie",
    "bearer", "otp", "pin", "privatekey", "accesskey", "sessionid", "sessionkey",
    "clientsecret", "signingkey",
})
"""Words that name a credential, alone or joined with the next word (``api_key``)."""
_WORDS: Final = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")


def is_credential_key(key: str) -> bool:
    """Whether an argument name names a credential: ``password``, ``GITHUB_TOKEN``,
    ``apiKey``, ``X-Authorization``, ``private_key`` … (a word of it, or two joined)."""
    words = [word.lower() for word in _WORDS.findall(key)]
    pairs = (a + b for a, b in itertools.pairwise(words))
    return any(word in CREDENTIAL_WORDS for word in (*words, *pairs))
