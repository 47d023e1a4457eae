"""The PostgreSQL engine of the memory store (docs/teams.md): the same stores over a
psycopg connection pool, one tenant per daemon, row-level security in the database.
Imported only when ``memory.store.engine`` is ``postgres``."""
