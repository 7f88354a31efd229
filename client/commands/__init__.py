"""Subcommands of the `tierank` command line, one module each (see `tierank.client.cli`)."""
