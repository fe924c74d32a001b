"""Python client of the skald-telegram agent host's local API.

Agent code asks a person for an approval, or a question's answer, and waits for it::

    from skald_telegram import AgentClient

    outcome = AgentClient().request_approval("deploy", arguments={"env": "production"})
    if outcome.approved:
        ...

The host (``skald-telegram agent serve``) must be running on the same machine; the client
reaches it through the Unix socket in the host's state folder. This package depends on
httpx only: agent code imports it without the bot.
"""

from skald_telegram.client import (
    AgentClient,
    ApiError,
    AsyncAgentClient,
    ClientError,
    HostUnavailable,
    Outcome,
    default_state_dir,
)

__all__ = [
    "AgentClient",
    "ApiError",
    "AsyncAgentClient",
    "ClientError",
    "HostUnavailable",
    "Outcome",
    "default_state_dir",
]
