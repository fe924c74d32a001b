"""The tests' PostgreSQL: a server that answers, and an empty database for each test."""

from __future__ import annotations

import psycopg


def test_each_test_gets_an_empty_database_of_its_own(postgres_url: str,
                                                     postgres_server: str) -> None:
    with psycopg.connect(postgres_url) as connection:
        tables = connection.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchone()
        assert tables == (0,)
        connection.execute("CREATE TABLE kept (n integer)")
    assert postgres_url != postgres_server
    with psycopg.connect(postgres_server) as connection:
        [name] = connection.execute("SELECT current_database()").fetchone() or [None]
        assert name == "postgres"
