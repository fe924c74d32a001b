"""skald-telegram: a Telegram bridge that lets people approve Skald agents' tool calls."""

__version__ = "0.1.0"
