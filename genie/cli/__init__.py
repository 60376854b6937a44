"""genie's command line: typer commands that parse, call one service, and print."""
