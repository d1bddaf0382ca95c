"""End-to-end tests: whole builds, the query module over them, and every client (CLI, HTTP, MCP, Dagster, the daemon)."""
