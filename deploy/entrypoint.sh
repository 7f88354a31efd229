#!/bin/sh
# Compose and Swarm secrets arrive as files under /run/secrets, but the server reads these
# settings from its environment. NAME_FILE=path sets NAME to that file's content, so the value
# never sits in the container's configuration (`docker inspect`); an empty file leaves NAME
# unset (e.g. a provider you do not use). Every argument goes to `tierank serve`.
set -eu

for name in TIERANK_SECRET_KEY OPENAI_API_KEY ANTHROPIC_API_KEY GEMINI_API_KEY; do
    path=$(printenv "${name}_FILE" || true)
    if [ -n "$path" ]; then
        value=$(cat "$path")
        if [ -n "$value" ]; then
            export "$name=$value"
        fi
        unset "${name}_FILE"
    fi
done

exec tierank serve "$@"
