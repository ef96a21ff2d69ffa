#!/usr/bin/env bash
# Throughput benchmarks; each prints one JSON object per line. Not part of the test suite:
# these machines are shared, so compare figures measured within one run, as ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
S3=${S3:-.venv/bin/s3}
"$S3" bench sim --json --seconds "${SECONDS_PER_BENCH:-20}"
