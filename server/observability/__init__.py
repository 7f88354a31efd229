"""What the server tells the teams that run it, beside its logs: OpenTelemetry traces (off
unless an OTLP endpoint is configured) and the judge-level Prometheus series. docs/operations.md
describes both. Nothing here imports the layers it observes: they call it."""
