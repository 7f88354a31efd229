"""`python -m tierank.server.db_tool status|migrate --db URL` (`tierank db ...`): the schema
migrations of a PostgreSQL database, for operators.

Servers apply pending migrations themselves at start-up (under an advisory lock, so replicas
starting together do not race); `migrate` applies them ahead of a rolling upgrade, `status`
lists which are applied. A SQLite file needs neither: one server owns it, and applies its
migrations when it opens it (server/storage/sqlite/migrations.py).
"""

from __future__ import annotations

import argparse
import os
import sys

import anyio

from tierank.server.errors import StorageError
from tierank.server.settings import OneLineParser, ServerSettings, add_settings, given_settings
from tierank.server.storage.by_url import is_postgres, shown


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="tierank db",
        description="Schema migrations of a tierank PostgreSQL database.",
    )
    p.add_argument("action", choices=["status", "migrate"], help="list or apply migrations")
    add_settings(p, ["db"])
    return p


async def _run(action: str, location: str) -> None:
    from tierank.server.storage.postgres import migrate, migration_status

    if action == "migrate":
        applied = await migrate(location)
        print(f"{shown(location)}: applied {len(applied)} migrations {applied}".rstrip())
        return
    for version, description, done in await migration_status(location):
        print(f"{version:4d}  {'applied' if done else 'pending'}  {description}")


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    # The server's --db: the flag, else $TIERANK_DB, else the default database.
    db = str(ServerSettings(**given_settings(p, args, os.environ, ["db"])).db)
    if not is_postgres(db):
        print(
            f"{shown(db)} is a SQLite database: its migrations are applied when a server opens "
            "it, there is nothing to migrate"
        )
        return 0
    try:
        anyio.run(_run, args.action, db)
    except StorageError as error:
        print(f"tierank db: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
