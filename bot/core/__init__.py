"""The bot's pure domain core: the records it holds, the inbox state machine, who may
decide what (policy) and what a card shows. No I/O: no database, no Telegram, no sockets.
"""
