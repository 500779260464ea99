#!/usr/bin/env bash
# Corolla image entry point: one image, several roles.
#
#   superlink   flower-superlink (Fleet API 9092, Control API 8000); TLS and SuperNode
#               authentication when COROLLA_CERTS holds ca.crt, server.pem, server.key
#   supernode   flower-supernode with node config clients="auto" (or COROLLA_NODE_CONFIG);
#               TLS when COROLLA_CERTS is set, with a node key claimed from COROLLA_CERTS/keys
#   register    (TLS) register every public key in COROLLA_CERTS/keys with the SuperLink
#   submit      corolla run --superlink COROLLA_CONTROL (default superlink:8000), preset, rounds and
#               overrides from COROLLA_PRESET, COROLLA_ROUNDS, COROLLA_SET; results in /runs
#   anything else is executed as given (e.g. `corolla presets`, `bash`)
set -euo pipefail

link_host=${COROLLA_SUPERLINK_HOST:-superlink}
control=${COROLLA_CONTROL:-$link_host:8000}
fleet=${COROLLA_FLEET:-$link_host:9092}
certs=${COROLLA_CERTS:-}
claims=${COROLLA_CLAIMS:-/claims}

wait_tcp() {  # host:port, seconds
  python3 - "$1" "${2:-180}" <<'PY'
import socket, sys, time
host, port = sys.argv[1].rsplit(":", 1)
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
        sys.exit(0)
    except OSError:
        time.sleep(0.5)
sys.exit(f"{host}:{port} does not answer")
PY
}

flwr_connection() {  # a flwr CLI connection named "corolla" to the Control API
  export FLWR_HOME=${FLWR_HOME:-/tmp/flwr-home}
  mkdir -p "$FLWR_HOME"
  if [ -n "$certs" ]; then
    printf '[superlink]\ndefault = "corolla"\n[superlink.corolla]\naddress = "%s"\nroot-certificates = "%s"\n' \
      "$control" "$certs/ca.crt" > "$FLWR_HOME/config.toml"
  else
    printf '[superlink]\ndefault = "corolla"\n[superlink.corolla]\naddress = "%s"\ninsecure = true\n' \
      "$control" > "$FLWR_HOME/config.toml"
  fi
}

claim_key() {  # one node key per container, claimed atomically in the shared claims volume
  mkdir -p "$claims"
  for pub in "$certs"/keys/*.pub; do
    name=$(basename "$pub" .pub)
    if mkdir "$claims/$name" 2>/dev/null; then
      echo "$HOSTNAME" > "$claims/$name/owner"
      echo "$certs/keys/$name"
      return 0
    fi
    if [ "$(cat "$claims/$name/owner" 2>/dev/null)" = "$HOSTNAME" ]; then
      echo "$certs/keys/$name"
      return 0
    fi
  done
  echo "no unclaimed node key left in $certs/keys (generate more with docker/certs.sh)" >&2
  return 1
}

role=${1:-help}
[ $# -gt 0 ] && shift
case "$role" in
  superlink)
    if [ -n "$certs" ]; then
      tls=(--ssl-ca-certfile "$certs/ca.crt" --ssl-certfile "$certs/server.pem" --ssl-keyfile "$certs/server.key"
           --enable-supernode-auth)
    else
      tls=(--insecure)
    fi
    exec flower-superlink "${tls[@]}" --disable-runtime-dependency-installation \
      --fleet-api-address 0.0.0.0:9092 --host 0.0.0.0 --port 8000 "$@"
    ;;
  supernode)
    nc=${COROLLA_NODE_CONFIG:-clients=\"auto\" data-dir=\"/data\" state-dir=\"/state\"}
    if [ -n "$certs" ]; then
      key=$(claim_key)
      tls=(--root-certificates "$certs/ca.crt" --auth-supernode-private-key "$key")
      echo "SuperNode with key $(basename "$key")"
    else
      tls=(--insecure)
    fi
    wait_tcp "$fleet"
    exec flower-supernode "${tls[@]}" --superlink "$fleet" --host 127.0.0.1 --port 9094 --node-config "$nc" "$@"
    ;;
  register)
    [ -n "$certs" ] || { echo "register: COROLLA_CERTS is not set" >&2; exit 2; }
    rm -rf "${claims:?}"/* 2>/dev/null || true
    wait_tcp "$control"
    flwr_connection
    for pub in "$certs"/keys/*.pub; do
      flwr supernode register "$pub" corolla
    done
    ;;
  submit)
    wait_tcp "$control"
    args=(--superlink "$control" --nodes "${COROLLA_NODES:-1}")
    [ -n "$certs" ] && args+=(--root-certificates "$certs/ca.crt")
    if [ -n "${COROLLA_RESUME:-}" ]; then
      args+=(--resume "/runs/$COROLLA_RESUME")
    else
      preset=${COROLLA_PRESET:-fedavg-mf-ml100k}
      args+=(--preset "$preset" --out "/runs/${COROLLA_RUN_NAME:-$preset-$(date +%Y%m%d-%H%M%S)}")
      [ -n "${COROLLA_ROUNDS:-}" ] && args+=(--set "num-rounds=$COROLLA_ROUNDS")
      for kv in ${COROLLA_SET:-}; do args+=(--set "$kv"); done
    fi
    exec corolla run "${args[@]}" "$@"
    ;;
  help|--help|-h)
    sed -n '2,13p' "$0"
    ;;
  *)
    exec "$role" "$@"
    ;;
esac
