#!/usr/bin/env bash
# Corolla image entry point: one image, several roles. Started as root (the image's default), it
# gives the writable volumes to a plain user (COROLLA_UID/COROLLA_GID, default 10001, or the owner
# of a bind-mounted /runs), copies the TLS keys for that user, and runs the role as that user.
#
#   superlink   flower-superlink (Control API 8000; Fleet API: HTTP on 8000 with Flower 1.42, gRPC on 9092
#               with Flower 1.39, the image's line, flower_io/compat.py); with COROLLA_CERTS (ca.crt,
#               server.pem, server.key, keys/*.pub): TLS and SuperNode authentication, and it
#               registers every public key in keys/ itself, then marks the claims volume ready
#   supernode   corolla supernode (flower-supernode with settable waits) with node config clients="auto" (or COROLLA_NODE_CONFIG);
#               TLS when COROLLA_CERTS is set, with a node key of its own claimed from keys/
#   register    (TLS) register every public key in COROLLA_CERTS/keys with a running SuperLink
#   submit      corolla run --superlink COROLLA_CONTROL (default superlink:8000), preset, rounds and
#               overrides from COROLLA_PRESET, COROLLA_ROUNDS, COROLLA_SET; results in /runs
#   anything else is executed as given (e.g. `corolla presets`, `bash`)
set -euo pipefail

link_host=${COROLLA_SUPERLINK_HOST:-superlink}
control=${COROLLA_CONTROL:-$link_host:8000}
# the Fleet API of the image's Flower line (flower_io/compat.py): HTTP on the SuperLink's 8000 (1.42), gRPC on 9092 (1.39)
if [ "$(python3 -c 'from flower_io import compat; print(compat.fleet_transport())')" = grpc ]; then
  fleet_port=9092 fleet_args=(--fleet-api-address 0.0.0.0:9092)
else
  fleet_port=8000 fleet_args=()
fi
fleet=${COROLLA_FLEET:-$link_host:$fleet_port}
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

drop_root() {  # role args...: as root, prepare the volumes, then run this script again as a plain user
  [ "$(id -u)" = 0 ] || return 0
  local uid=${COROLLA_UID:-} gid=${COROLLA_GID:-}
  if [ -z "$uid" ]; then
    # the owner of a bind-mounted results folder when it is a host user (its files stay theirs),
    # else the image's user
    uid=10001 gid=10001
    if [ -d /runs ] && [ "$(stat -c %u /runs)" != 0 ] && [ "$(stat -c %u /runs)" != 10001 ]; then
      uid=$(stat -c %u /runs) gid=$(stat -c %g /runs)
    fi
  fi
  gid=${gid:-$uid}
  [ "$uid" != 0 ] || { echo "COROLLA_UID=0: Corolla's containers do not run as root" >&2; exit 2; }
  for d in /runs /state /cache; do   # fresh volumes and root-made host folders become the user's
    if [ -d "$d" ] && [ "$(stat -c %u "$d")" = 0 ] && touch "$d/.w" 2>/dev/null; then
      rm -f "$d/.w"; chown -R "$uid:$gid" "$d"
    fi
  done
  if [ -n "$certs" ]; then
    mkdir -p "$claims"
    if [ "$1" = superlink ]; then rm -rf "${claims:?}"/* "$claims/.registered"; fi   # a fresh key pool
    chmod 1777 "$claims"   # the SuperLink's and the SuperNodes' users both write there
    # the private keys are 0600 and owned by whoever made them: a copy this user alone can read
    local copy=/tmp/corolla-certs
    rm -rf "$copy" && cp -rL "$certs" "$copy" && chown -R "$uid:$gid" "$copy" && chmod -R go-rwx "$copy"
    export COROLLA_CERTS=$copy
  fi
  export HOME=/tmp/corolla-home
  mkdir -p "$HOME" && chown "$uid:$gid" "$HOME"
  exec setpriv --reuid="$uid" --regid="$gid" --clear-groups "$0" "$@"
}

role=${1:-help}
case "$role" in superlink|supernode|register|submit) drop_root "$@" ;; esac
certs=${COROLLA_CERTS:-}
[ $# -gt 0 ] && shift
for d in /runs /state /cache; do   # a folder the user cannot write is one line naming the fix
  case "$role:$d" in superlink:/runs|submit:/runs|supernode:/state|supernode:/cache)
    if [ -d "$d" ] && ! { touch "$d/.w" 2>/dev/null && rm -f "$d/.w"; }; then
      echo "error: $d is not writable by uid $(id -u) (its owner is uid $(stat -c %u "$d")): make it writable" \
           "(chmod a+w on the host folder) or run the containers as its owner (COROLLA_UID=$(stat -c %u "$d"))" >&2
      exit 2
    fi ;;
  esac
done
case "$role" in
  superlink)
    [ -z "$certs" ] || rm -rf "${claims:?}"/* "$claims/.registered" 2>/dev/null || true
    link_args=(--disable-runtime-dependency-installation "${fleet_args[@]}" --host 0.0.0.0 --port 8000)
    if [ -z "$certs" ]; then
      exec flower-superlink --insecure "${link_args[@]}" "$@"
    fi
    # TLS: the SuperLink keeps registered keys in memory, so it registers the pool at every start
    flower-superlink --ssl-ca-certfile "$certs/ca.crt" --ssl-certfile "$certs/server.pem" \
      --ssl-keyfile "$certs/server.key" --enable-supernode-auth "${link_args[@]}" "$@" &
    link_pid=$!
    trap 'kill -TERM "$link_pid" 2>/dev/null' TERM INT
    control=127.0.0.1:8000
    wait_tcp "$control"
    flwr_connection
    for pub in "$certs"/keys/*.pub; do
      flwr supernode register "$pub" corolla
    done
    touch "$claims/.registered"
    wait "$link_pid"
    ;;
  supernode)
    nc=${COROLLA_NODE_CONFIG:-clients=\"auto\" data-dir=\"/data\" state-dir=\"/state\"}
    wait_tcp "$fleet"
    if [ -n "$certs" ]; then
      for _ in $(seq 1 240); do [ -f "$claims/.registered" ] && break; sleep 0.5; done
      [ -f "$claims/.registered" ] || { echo "the SuperLink did not register the node keys" >&2; exit 1; }
      key=$(claim_key)
      tls=(--root-certificates "$certs/ca.crt" --auth-supernode-private-key "$key")
      echo "SuperNode with key $(basename "$key")"
    else
      tls=(--insecure)
    fi
    # Flower's SuperNode with short waits (corolla supernode; COROLLA_IDLE_POLL, default 0.05 s on a
    # compose network: see docs/deployment.md for the SuperLink's cost per idle node)
    exec corolla supernode --idle-poll "${COROLLA_IDLE_POLL:-0.05}" --reply-poll "${COROLLA_REPLY_POLL:-0.05}" \
      --pull-backoff "${COROLLA_PULL_BACKOFF:-0.02}" \
      "${tls[@]}" --superlink "$fleet" --host 127.0.0.1 --port 9094 --node-config "$nc" "$@"
    ;;
  register)
    [ -n "$certs" ] || { echo "register: COROLLA_CERTS is not set" >&2; exit 2; }
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
    sed -n '2,18p' "$0"
    ;;
  *)
    exec "$role" "$@"
    ;;
esac
