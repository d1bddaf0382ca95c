"""The state store, the index's system of record: its protocol, the SQLite store and the PostgreSQL one."""
