"""The Telegram side: python-telegram-bot handlers, the card worker, the timers and the
Bot API gateway. It reads the bot's state through a read-only view and changes it only
through :class:`bot.bridge.Bridge`."""
