"""Pure, Dagster-free building blocks shared by the assets, the query module and the eval command."""
