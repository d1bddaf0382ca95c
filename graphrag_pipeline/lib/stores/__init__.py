"""Store protocols and their embedded implementations."""
