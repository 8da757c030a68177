"""Fixtures shared by several test modules: a throwaway PostgreSQL server (tests/pgserver.py)."""

from pgserver import pg_server, pg_url  # noqa: F401  (fixtures, found by name)
