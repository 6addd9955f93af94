#!/usr/bin/env bash
# The end-to-end figures of bench/README.md and their plots, in one command (run it on a quiet machine):
# WebSocket and callback channels with non-confirmable notifications (25 000/s offered), then one PNG per result
# (delivered events/s against the offered rate, latency p50/p99, second by second) from bench/plot.py.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 bench/e2e_bench.py --channel websocket --devices 200 --rate 25000 --seconds 5 --runs 3 --non
python3 bench/e2e_bench.py --channel callback --devices 200 --rate 25000 --seconds 5 --runs 3 --non
python3 bench/plot.py
