#!/bin/sh
# Makes, or replaces, the Secrets the manifests read, in kubectl's current namespace, from the
# files made in deploy/secrets/ (README.md, "Certificates and keys"):
#   deploy/k8s/create-secrets.sh            # k8s/ and k8s-mtls/: asks for the database URL
#   deploy/k8s/create-secrets.sh --sqlite   # k8s-sqlite/: no database, so no URL
# Optional Secrets are made from files that are there and not empty: secret-key, the provider
# keys, and for mutual TLS client-ca.crt with tierank-probe.crt and .key. The database URL
# (postgresql://tierank:PASSWORD@host:5432/tierank?sslmode=verify-full) is read at a prompt
# that does not echo it, and goes to kubectl on a pipe: never on a command line, in shell
# history or in a file. TIERANK_SECRETS_DIR names another folder of files.
set -eu
secrets=${TIERANK_SECRETS_DIR:-$(dirname "$0")/../secrets}
database=yes
case "${1-}" in
  --sqlite) database=no ;;
  "") ;;
  *) echo "usage: $0 [--sqlite]" >&2; exit 2 ;;
esac

# Created client-side and applied, so that running this again replaces what is there.
apply() {
  kubectl create secret "$@" --dry-run=client -o yaml | kubectl apply -f -
}
has() {
  [ -s "$secrets/$1" ]
}
for required in tls.crt tls.key ca.crt; do
  has "$required" || { echo "$0: $secrets/$required is missing or empty" >&2; exit 1; }
done

apply generic tierank-tls --type=kubernetes.io/tls \
  --from-file="$secrets/tls.crt" --from-file="$secrets/tls.key" --from-file="$secrets/ca.crt"
if [ "$database" = yes ]; then
  if [ -t 0 ]; then
    printf 'database URL (postgresql://...; not shown): ' >&2
    stty -echo
    IFS= read -r url || true
    stty echo
    echo >&2
  else
    IFS= read -r url || true
  fi
  case "$url" in
    postgresql://* | postgres://*) ;;
    *) echo "$0: the database URL must start with postgresql://" >&2; exit 1 ;;
  esac
  printf '%s' "$url" | apply generic tierank-database --from-file=TIERANK_DB=/dev/stdin
  unset url
fi
if has secret-key; then
  apply generic tierank-secret-key --from-file=TIERANK_SECRET_KEY="$secrets/secret-key"
fi
set --  # the provider keys that are there, one --from-file each
for pair in OPENAI_API_KEY=openai-api-key ANTHROPIC_API_KEY=anthropic-api-key \
  GEMINI_API_KEY=gemini-api-key; do
  if has "${pair#*=}"; then
    set -- "$@" "--from-file=${pair%%=*}=$secrets/${pair#*=}"
  fi
done
if [ $# -gt 0 ]; then
  apply generic tierank-provider-keys "$@"
fi
if has client-ca.crt; then
  apply generic tierank-client-ca --from-file=ca.crt="$secrets/client-ca.crt"
  apply tls tierank-probe-cert \
    --cert="$secrets/tierank-probe.crt" --key="$secrets/tierank-probe.key"
fi
