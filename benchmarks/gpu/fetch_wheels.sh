#!/usr/bin/env bash
# Fetches, here (a machine that reaches PyPI), the wheels a GPU machine's image lacks, into benchmarks/gpu/wheels/,
# the folder that travels with the checkout to it; then, there: bash benchmarks/gpu/run.sh OUT (docs/gpu.md).
# Run it with the project's environment active (its versions are the ones pinned): fetch_wheels.py --help says more.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "${PYTHON:-python}" "$here/fetch_wheels.py" "$@"
