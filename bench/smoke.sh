#!/usr/bin/env bash
# Runs every benchmark in smoke mode: seconds each, checks it runs and prints its summary line.
# (bench/rest_bench.py needs wrk from Debian: .ci/run installs it)
# (bench/micro/dtls_library_bench.py is the python-mbedtls half of the DTLS library choice, skipped unless python-mbedtls
#  is installed by hand (not a dependency since issue 29 #7); its OpenSSL half,
#  bench/dtls_openssl, is a separate cargo build run by hand: bench/README.md "DTLS library choice")
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench -p devicehub-codec -p devicehub-io -- --test
for bench in bench/micro/*.py bench/*_bench.py bench/rest_load.py; do
  [ -e "$bench" ] || continue
  echo "-- $bench"
  python3 "$bench" --smoke
done
echo "-- bench/e2e_bench.py --channel callback"
python3 bench/e2e_bench.py --smoke --channel callback
echo "-- bench/e2e_bench.py --channel callback --trusted"
python3 bench/e2e_bench.py --smoke --channel callback --trusted
echo "-- bench/e2e_bench.py --redis"
python3 bench/e2e_bench.py --smoke --redis
echo "-- bench/scale_bench.py --redis"
python3 bench/scale_bench.py --smoke --redis
echo "-- bench/sim_bench.py --e2e"
python3 bench/sim_bench.py --smoke --e2e
echo "-- bench/sim_bench.py --register"
python3 bench/sim_bench.py --smoke --register
echo "-- bench/overload_bench.py --ramp"
python3 bench/overload_bench.py --smoke --ramp
echo "-- bench/overload_bench.py --shed-cost"
python3 bench/overload_bench.py --smoke --shed-cost
echo "-- bench/register_bench.py --measure-cpu --store-compare"
python3 bench/register_bench.py --smoke --measure-cpu --store-compare
echo "-- bench/register_bench.py --measure-cpu --store-compare --waves 2"
python3 bench/register_bench.py --smoke --measure-cpu --store-compare --waves 2
echo "-- bench/cluster_bench.py --node-kill"
python3 bench/cluster_bench.py --smoke --node-kill
echo "-- bench/soak.py"
python3 bench/soak.py --smoke
