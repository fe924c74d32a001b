"""What a session sends the relay, frame by frame: envelopes checked (structure, size,
``from`` is the session's id) and handed to the next transaction, acknowledgements
recorded, anything else refused with a reason. Answers go in the session's queue of
answers, in the order of the frames.

The common ``send`` frame, written as clients write it, is read without decoding it as
JSON (:func:`bot.relay.frames.read_send`); anything else takes the full parse.
"""

from __future__ import annotations

from bot.errors import EnvelopeRefused, RefusalReason
from bot.protocol.envelope import parse_envelope
from bot.relay.commit import QueueWriter
from bot.relay.frames import (
    Ack,
    ErrorCode,
    FrameError,
    Send,
    encode_envelope,
    parse_frame,
    read_send,
)
from bot.relay.queue import Incoming
from bot.relay.refusals import WarningBudget, refusal
from bot.relay.session import PendingSend, Session


class Intake:
    """Takes the frames of every session for one writer."""

    def __init__(self, writer: QueueWriter, warnings: WarningBudget) -> None:
        self._writer = writer
        self._warnings = warnings

    async def on_frame(self, session: Session, message: str | bytes) -> bool:
        """Handle one frame of a session; ``True`` if it was refused."""
        if isinstance(message, str) and (send := read_send(message)) is not None:
            accepted = self._queue_send(
                session, send.envelope_id, send.sender, send.recipient, send.text
            )
            await session.answers.put(accepted)
            return isinstance(accepted, str)
        try:
            frame = parse_frame(message)
        except FrameError as exc:
            answer = refusal(self._warnings, session.id, exc.code, exc.detail, exc.envelope_id)
            await session.answers.put(answer)
            return True
        if isinstance(frame, Send):
            accepted = self._accept(session, frame)
            await session.answers.put(accepted)
            return isinstance(accepted, str)
        if isinstance(frame, Ack):
            session.acknowledged(frame.id)
            self._writer.ack(session.id, frame.id)
            return False
        detail = f"unexpected {type(frame).__name__.lower()} frame"
        await session.answers.put(refusal(self._warnings, session.id, ErrorCode.BAD_FRAME, detail))
        return True

    def _accept(self, session: Session, frame: Send) -> str | PendingSend:
        """Check an envelope and hand it to the next transaction; its pending answer, or
        the refusal to send at once."""
        try:
            envelope = parse_envelope(frame.envelope)
        except EnvelopeRefused as exc:
            code = (
                ErrorCode.TOO_LARGE
                if exc.reason is RefusalReason.TOO_LARGE
                else ErrorCode.BAD_ENVELOPE
            )
            return refusal(self._warnings, session.id, code, str(exc), frame.envelope_id)
        body = frame.text if frame.text is not None else encode_envelope(frame.envelope)
        return self._queue_send(session, envelope.id, envelope.sender, envelope.recipient, body)

    def _queue_send(
        self, session: Session, envelope_id: str, sender: str, recipient: str, body: str
    ) -> str | PendingSend:
        """Hand a checked envelope to the next transaction, unless its ``from`` is not the
        session's id; its pending answer, or the refusal to send at once."""
        if sender != session.id:
            detail = "from is not this session's id"
            return refusal(self._warnings, session.id, ErrorCode.BAD_ENVELOPE, detail, envelope_id)
        return self._writer.put(
            Incoming(recipient, sender, envelope_id, body, address=session.ws.address)
        )
