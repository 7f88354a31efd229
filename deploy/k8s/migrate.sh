#!/bin/sh
# Runs the schema migration Job (deploy/k8s/migrate/) with the image of deploy/k8s/image/, in
# kubectl's current namespace, and waits for its end: exit 0 when it completed; its log and
# exit 1 when it failed (the Job gives up after its activeDeadlineSeconds). Run it before each
# rollout (README.md, "Several replicas on PostgreSQL").
set -eu
here=$(dirname "$0")
kubectl delete job tierank-migrate --ignore-not-found
kubectl apply -k "$here/migrate"
while :; do
  # The Job's conditions that hold: Complete, or Failed (newer clusters add others first).
  conditions=$(kubectl get job tierank-migrate \
    -o jsonpath='{.status.conditions[?(@.status=="True")].type}')
  case " $conditions " in
    *" Complete "*) echo "tierank-migrate: the database is migrated"; exit 0 ;;
    *" Failed "*)
      echo "tierank-migrate failed; its log:" >&2
      kubectl logs job/tierank-migrate >&2 || true
      exit 1 ;;
  esac
  sleep 2
done
