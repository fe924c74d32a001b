"""The agent host: one Skald agent identity as a local service for scripts and coding agents.

``store`` keeps its state in SQLite, ``items``, ``pairing`` and ``describe`` are pure,
``service`` speaks the protocol through the relay client, ``api`` is the local HTTP API and
``serve`` runs it all.
"""
