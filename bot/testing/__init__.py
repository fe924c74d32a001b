"""Helpers for tests, benchmarks and the demo: never imported by the product itself.

:mod:`bot.testing.agent` is an in-memory Skald agent (the other end of the bot);
:mod:`bot.testing.replay` a replay set held in memory.
"""
