"""A connection's first seconds on the relay: the Ed25519 challenge (protocol §4) that
turns it into a session of one id, under tighter limits than a session's.

Before authentication a frame may hold :data:`PRE_AUTH_FRAME_BYTES` (a larger one is
refused with ``too_large`` and the connection closed, 1009); after ``MAX_REFUSED_FRAMES``
refused frames in a row the connection is closed (1008), and a client that does not
authenticate in time is closed by the caller (4408).
"""

from __future__ import annotations

import asyncio
import os
from typing import Final

from websockets.asyncio.server import ServerConnection
from websockets.frames import CloseCode

from bot.errors import ProtocolError
from bot.protocol.relayauth import verify_auth_frame
from bot.relay.frames import (
    NONCE_BYTES,
    Auth,
    ErrorCode,
    FrameError,
    RelayCloseCode,
    Send,
    challenge_frame,
    parse_frame,
)
from bot.relay.refusals import RefusalStreak, WarningBudget, refusal
from bot.relay.session import TOO_MANY_REFUSALS
from bot.relay.transport import close_draining, frame_size, peer

AUTH_TIMEOUT_S: Final = 10.0
PRE_AUTH_FRAME_BYTES: Final = 4096
"""The largest frame answered before authentication (an ``auth`` frame is ~200 bytes)."""
PRE_AUTH_MESSAGE_BYTES: Final = 64 * 1024
"""Before authentication, websockets itself closes (1009) on a larger message."""


async def authenticate(
    ws: ServerConnection, warnings: WarningBudget, timeout: float
) -> str | None:
    """Run the challenge; the session's id, or ``None`` after refusing it. Raises
    ``TimeoutError`` after ``timeout`` seconds, ``ConnectionClosed`` if the peer leaves."""
    nonce = os.urandom(NONCE_BYTES)
    refusals = RefusalStreak()

    async def refuse(code: str, detail: str, envelope_id: str | None = None) -> None:
        await ws.send(refusal(warnings, peer(ws), code, detail, envelope_id))

    await ws.send(challenge_frame(nonce))
    async with asyncio.timeout(timeout):
        while True:
            message = await ws.recv()
            if frame_size(message) > PRE_AUTH_FRAME_BYTES:
                detail = f"frames before auth are limited to {PRE_AUTH_FRAME_BYTES} bytes"
                await refuse(ErrorCode.TOO_LARGE, detail)
                await close_draining(ws, CloseCode.MESSAGE_TOO_BIG, "authenticate first")
                return None
            try:
                frame = parse_frame(message)
            except FrameError as exc:
                await refuse(exc.code, exc.detail, exc.envelope_id)
            else:
                if isinstance(frame, Auth):
                    try:
                        return verify_auth_frame(frame.frame, nonce)
                    except ProtocolError as exc:
                        await refuse(ErrorCode.AUTH_FAILED, str(exc))
                        await close_draining(
                            ws, RelayCloseCode.AUTH_FAILED, "authentication failed"
                        )
                        return None
                envelope_id = frame.envelope_id if isinstance(frame, Send) else None
                await refuse(ErrorCode.NOT_AUTHENTICATED, "authenticate first", envelope_id)
            if refusals.count(True):
                await close_draining(ws, TOO_MANY_REFUSALS.code, TOO_MANY_REFUSALS.reason)
                return None
