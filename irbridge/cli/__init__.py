"""The `irbridge` command line (typer): one module per command group."""
