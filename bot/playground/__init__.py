"""The playground: a local stand-in for the Telegram Bot API and a web page that shows its chats.

The stand-in (:mod:`bot.playground.stub`) is also what the tests run the bot against.
"""

DEFAULT_PORT = 8780
"""Where the playground's page and Bot API listen unless ``--port`` says otherwise."""
DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}/"
KEY_VARIABLE = "SKALD_PLAYGROUND_KEY"
"""Where ``render --playground`` finds the playground's key: an environment, unlike a command
line, is not readable by other users."""
