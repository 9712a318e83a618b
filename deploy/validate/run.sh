#!/usr/bin/env bash
# Validates prq's deployment files: the Prometheus alert rules (parsed and
# evaluated on recorded series by Prometheus's own packages), the Grafana
# dashboard (structure, PromQL, metric names) and the Helm chart (helm lint
# and helm template, pinned in go.mod, then every manifest decoded strictly
# into Kubernetes' typed objects). Needs only Go and the module proxy.
set -euo pipefail
cd "$(dirname "$0")"
start=$(date +%s)
echo "validate: gofmt"
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
  echo "these files are not gofmt-clean:" >&2
  echo "$unformatted" >&2
  exit 1
fi
phase() { echo "validate: $1 ($(( $(date +%s) - start ))s)"; }
phase "go vet"
go vet ./...
# Build the pinned Helm first, so the tests' time limit does not cover
# compiling it on a cold cache.
phase "helm (go tool helm, pinned in go.mod)"
go tool helm version --short
phase "alert rules, dashboard, chart, compose"
go test -count=1 -timeout 30m ./...
phase "done"
