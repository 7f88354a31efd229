#!/bin/sh
# Compose and Swarm secrets arrive as files under /run/secrets, but the server reads these
# settings from its environment. NAME_FILE=path sets NAME to that file's content, so the value
# never sits in the container's configuration (`docker inspect`); an empty file leaves NAME
# unset (e.g. a provider you do not use). PGPASSWORD is libpq's: the password of a
# postgresql:// TIERANK_DB that does not carry one.
#
# Arguments that start with an option (or none) go to `tierank serve`; a first argument that
# is a word names another command, e.g. `db migrate`, which then runs with the same secrets.
set -eu

for name in TIERANK_SECRET_KEY OPENAI_API_KEY ANTHROPIC_API_KEY GEMINI_API_KEY PGPASSWORD; do
    path=$(printenv "${name}_FILE" || true)
    if [ -n "$path" ]; then
        value=$(cat "$path")
        if [ -n "$value" ]; then
            export "$name=$value"
        fi
        unset "${name}_FILE"
    fi
done

case "${1:-}" in
    "" | -*) exec tierank serve "$@" ;;
    *) exec tierank "$@" ;;
esac
