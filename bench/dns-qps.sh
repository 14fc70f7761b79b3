#!/usr/bin/env bash
# DNS qps benchmark: installs dnsperf, Knot and PowerDNS (bind backend) when missing,
# builds the release binaries and runs `dns-bench` (our Geo GSLB vs Knot static vs
# PowerDNS LUA ifportup, the same dnsperf flags for all). Extra arguments go to
# dns-bench, e.g. `bench/dns-qps.sh --seconds 10 --rounds 3` or
# `bench/dns-qps.sh --dnsperf-args "-c 4 -T 2"`. See docs/benchmarks.md.
#
# Knot and PowerDNS run with their own configs in a temp dir on 127.0.0.1 (ports
# 15391 and 15392); the Debian packages' own services are not started by this script
# (PowerDNS gets `security-poll-suffix=` empty, so it queries nothing on the internet).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v dnsperf >/dev/null || need+=(dnsperf)
command -v dig >/dev/null || need+=(dnsutils)
command -v knotd >/dev/null || need+=(knot)
command -v pdns_server >/dev/null || [ -x /usr/sbin/pdns_server ] || need+=(pdns-server)
[ -e /usr/lib/x86_64-linux-gnu/pdns/libbindbackend.so ] \
  || ls /usr/lib/*/pdns/libbindbackend.so >/dev/null 2>&1 || need+=(pdns-backend-bind)
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing ${need[*]}"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  # The packages' own services may fail to start in a container (no init); that is fine:
  # the bench starts its own instances.
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi

cargo build --release -p federation-apiserver -p fedingress-bench --bins
exec target/release/dns-bench "$@"
