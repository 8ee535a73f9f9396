#!/usr/bin/env bash
# Refreshes api/schemas/dmtf from a DMTF Redfish schema bundle (DSP8010:
# a directory holding json-schema/ and csdl/), copying only the files the
# service and its tests use (api/schemas/refresh/main.go says which).
#   api/schemas/refresh.sh [BUNDLE_DIR]    (default ../shared/redfish)
# Relative paths are taken from the repository root.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec go run ./api/schemas/refresh -bundle "${1:-../shared/redfish}"
