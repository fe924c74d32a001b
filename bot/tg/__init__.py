"""The Telegram side: python-telegram-bot handlers, the card worker and the API gateway."""

import os

# Opt in to PTB's future behaviour (RetryAfter.retry_after as a timedelta) so that reading
# it warns neither here nor in PTB's rate limiter; the gateway accepts both forms.
os.environ.setdefault("PTB_TIMEDELTA", "1")
