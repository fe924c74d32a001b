"""The playground: a local stand-in for the Telegram Bot API and a web page that shows its chats.

The stand-in (:mod:`bot.playground.stub`) is also what the tests run the bot against.
"""
