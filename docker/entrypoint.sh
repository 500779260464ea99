#!/usr/bin/env bash
# Corolla image entry point: one image, several roles. Started as root (the image's default), it
# gives the writable volumes to a plain user (COROLLA_UID/COROLLA_GID, default 10001, or the owner
# of a bind-mounted /runs), copies the TLS files it was given for that user, and runs the role as
# that user.
#
#   superlink   flower-superlink (Control API 8000; Fleet API: HTTP on 8000 with Flower 1.42, gRPC on
#               9092 with Flower 1.39, the image's line, flower_io/compat.py). Published beyond the
#               host (COROLLA_BIND not a loopback address) only with TLS. With COROLLA_CERTS (ca.crt,
#               server.pem, server.key: no CA key, no node key): TLS and SuperNode authentication;
#               it registers every public key that appears in COROLLA_NODE_KEYS and marks it in
#               COROLLA_REGISTERED
#   supernode   corolla supernode (flower-supernode with settable waits) with node config clients="auto" (or COROLLA_NODE_CONFIG);
#               with COROLLA_CERTS (ca.crt only): TLS, and a node key pair it makes itself at its first
#               start, in its own container; only the public key leaves it (COROLLA_NODE_KEYS), and
#               the node trusts the keys there for secure aggregation (node config trusted-keys)
#   register    (TLS) register every public key in COROLLA_NODE_KEYS with a running SuperLink
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
node_keys=${COROLLA_NODE_KEYS:-/node-keys}
registered=${COROLLA_REGISTERED:-/registered}

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

refuse_insecure_bind() {  # the SuperLink published beyond this host only with TLS
  case "${COROLLA_BIND:-127.0.0.1}" in 127.*|localhost|::1|"[::1]") return 0 ;; esac
  [ -n "$certs" ] && return 0
  echo "error: COROLLA_BIND=$COROLLA_BIND publishes the SuperLink beyond this host without TLS (anyone who reaches it joins as a node and runs apps through its Control API): add the TLS overlay (docker/compose.tls.yaml) or bind 127.0.0.1" >&2
  exit 2
}

node_key() {  # this container's own node key pair, made at its first start; prints the private key's path
  local dir="$HOME/node-key"
  if [ ! -f "$dir/key" ]; then
    mkdir -p "$dir" && chmod 700 "$dir"
    python3 - "$dir/key" <<'PY'
import os, sys
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
k = ec.generate_private_key(ec.SECP384R1())
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
os.write(fd, k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                             serialization.NoEncryption()))
os.close(fd)
pub = k.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
open(sys.argv[1] + ".pub", "wb").write(pub + b"\n")
PY
  fi
  echo "$dir/key"
}

register_keys() {  # register every public key in $node_keys not yet marked in $registered
  for pub in "$node_keys"/*.pub; do
    [ -f "$pub" ] || continue
    name=$(basename "$pub" .pub)
    [ -f "$registered/$name" ] && continue
    if flwr supernode register "$pub" corolla >/dev/null 2>&1; then
      touch "$registered/$name" && echo "registered node key $name"
    fi
  done
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
    for d in "$node_keys" "$registered"; do   # fresh volumes become the user's (a read-only mount stays as it is)
      if [ -d "$d" ] && [ "$(stat -c %u "$d")" = 0 ] && touch "$d/.w" 2>/dev/null; then
        rm -f "$d/.w"; chown "$uid:$gid" "$d"
      fi
    done
    # what this container was given (the SuperLink: its certificate and key; the others: ca.crt),
    # copied for this user alone: a private key is 0600 and owned by whoever made it
    local copy=/tmp/corolla-certs
    rm -rf "$copy" && cp -rL "$certs" "$copy" && chown -R "$uid:$gid" "$copy" && chmod -R go-rwx "$copy"
    export COROLLA_CERTS=$copy
  fi
  export HOME=/tmp/corolla-home
  mkdir -p "$HOME" && chown "$uid:$gid" "$HOME"
  exec setpriv --reuid="$uid" --regid="$gid" --clear-groups "$0" "$@"
}

role=${1:-help}
[ "$role" != superlink ] || refuse_insecure_bind
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
    link_args=(--disable-runtime-dependency-installation "${fleet_args[@]}" --host 0.0.0.0 --port 8000)
    if [ -z "$certs" ]; then
      exec flower-superlink --insecure "${link_args[@]}" "$@"
    fi
    # TLS: the SuperLink keeps registered keys in memory, so every key is registered again at each
    # start, and every key a SuperNode publishes later as it appears
    rm -f "$registered"/* 2>/dev/null || true
    flower-superlink --ssl-ca-certfile "$certs/ca.crt" --ssl-certfile "$certs/server.pem" \
      --ssl-keyfile "$certs/server.key" --enable-supernode-auth "${link_args[@]}" "$@" &
    link_pid=$!
    trap 'kill -TERM "$link_pid" 2>/dev/null' TERM INT
    control=127.0.0.1:8000
    wait_tcp "$control"
    flwr_connection
    while kill -0 "$link_pid" 2>/dev/null; do
      register_keys
      sleep 0.5
    done
    wait "$link_pid"
    ;;
  supernode)
    nc=${COROLLA_NODE_CONFIG:-clients=\"auto\" data-dir=\"/data\" state-dir=\"/state\"}
    wait_tcp "$fleet"
    if [ -n "$certs" ]; then
      key=$(node_key)
      name=$(hostname)
      # only the public key leaves this container: published for the SuperLink to register and
      # for the other nodes to trust
      cp "$key.pub" "$node_keys/.$name.pub.tmp" && mv "$node_keys/.$name.pub.tmp" "$node_keys/$name.pub"
      for _ in $(seq 1 240); do [ -f "$registered/$name" ] && break; sleep 0.5; done
      [ -f "$registered/$name" ] || { echo "the SuperLink did not register this node's key ($name)" >&2; exit 1; }
      tls=(--root-certificates "$certs/ca.crt" --auth-supernode-private-key "$key")
      nc="$nc trusted-keys=\"$node_keys\""
      echo "SuperNode $name with its own key $(python3 -c 'import sys; from corolla.secagg.identity import fingerprint; print(fingerprint(open(sys.argv[1]).read()))' "$key.pub")"
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
    mkdir -p "$registered" 2>/dev/null || true
    register_keys
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
