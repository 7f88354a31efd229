"""`python -m tierank.client` is the `tierank` command."""

from tierank.client.cli import main

raise SystemExit(main())
