#!/usr/bin/env bash
# Corolla on Docker, start to finish, on a machine without registry access. Exit code non-zero on
# any failure; the metrics are printed last.
#
#   COROLLA_DATA=/path/to/datasets docker/smoke.sh
#
# 1. builds the image (docker/build-offline.sh: debootstrap base + host wheelhouse);
# 2. docker compose up: fedavg-mf-ml100k, 3 rounds, 3 SuperNode containers -> runs/smoke-3, exit 0;
# 3. the same with --scale supernode=5 -> runs/smoke-5, identical metrics required;
# 4. the TLS overlay (fresh certificates, registered node keys), 3 nodes -> runs/smoke-tls, exit 0;
# 5. the TLS overlay with secure aggregation (COROLLA_SET=secagg=secaggplus) -> runs/smoke-secagg,
#    the SecAgg+ phases in its rounds and the metrics of step 2 within 2e-3;
# 6. a SuperNode container with an unregistered key against that TLS SuperLink: refused (Flower's
#    exit code 305 in its log, [code: 2004]; the process exits non-zero).
set -euo pipefail
cd "$(dirname "$0")/.."
export COROLLA_DATA=${COROLLA_DATA:?set COROLLA_DATA to the dataset folder (layout: corolla/data/sources.py)}
export COROLLA_PRESET=fedavg-mf-ml100k COROLLA_ROUNDS=${COROLLA_ROUNDS:-3} COROLLA_OFFLINE=1
export COROLLA_IMAGE=${COROLLA_IMAGE:-corolla:latest}
if docker compose version >/dev/null 2>&1; then compose=(docker compose); else compose=(docker-compose); fi
project=corolla-smoke
logs=$(mktemp -d)
mkdir -p runs
rm -rf runs/smoke-3 runs/smoke-5 runs/smoke-tls runs/smoke-secagg

cleanup() { "${compose[@]}" -p "$project" -f compose.yaml -f docker/compose.tls.yaml down -v >/dev/null 2>&1 || true; }
trap cleanup EXIT

echo "== build"
docker/build-offline.sh "$COROLLA_IMAGE"

run_compose() {  # nodes run-name [compose files...]
  local n=$1 name=$2; shift 2
  local files=("$@")
  [ ${#files[@]} -gt 0 ] || files=(-f compose.yaml)
  local t0 rc=0
  t0=$(date +%s)
  COROLLA_NODES=$n COROLLA_RUN_NAME=$name "${compose[@]}" -p "$project" "${files[@]}" \
    up --no-build --scale supernode="$n" --exit-code-from run >"$logs/$name.log" 2>&1 || rc=$?
  "${compose[@]}" -p "$project" "${files[@]}" down -v >/dev/null 2>&1 || true
  echo "$name: exit code $rc, $(( $(date +%s) - t0 )) s (log: $logs/$name.log)"
  if [ "$rc" -ne 0 ] || [ ! -f "runs/$name/summary.json" ]; then
    tail -40 "$logs/$name.log"
    echo "FAILED: $name" >&2
    exit 1
  fi
}

echo "== compose, 3 SuperNodes"
run_compose 3 smoke-3
echo "== compose, --scale supernode=5"
run_compose 5 smoke-5
python3 - <<'PY'
import json, sys
a = json.load(open("runs/smoke-3/summary.json"))
b = json.load(open("runs/smoke-5/summary.json"))
assert a["status"] == b["status"] == "completed", (a["status"], b["status"])
if a["metrics"] != b["metrics"]:
    sys.exit(f"FAILED: 3 and 5 SuperNodes differ:\n{a['metrics']}\n{b['metrics']}")
print("3 and 5 SuperNodes: identical metrics")
PY

echo "== TLS overlay, 3 SuperNodes"
certs=$(mktemp -d)/certs
docker/certs.sh "$certs" >/dev/null   # CA and SuperLink certificate; the SuperNodes make their own keys
export COROLLA_CERTS_DIR=$certs
run_compose 3 smoke-tls -f compose.yaml -f docker/compose.tls.yaml

echo "== TLS overlay with secure aggregation (SecAgg+), 3 SuperNodes"
COROLLA_SET="secagg=secaggplus" run_compose 3 smoke-secagg -f compose.yaml -f docker/compose.tls.yaml
python3 - <<'PY'
import json, sys
a = json.load(open("runs/smoke-3/summary.json"))
b = json.load(open("runs/smoke-secagg/summary.json"))
r = [json.loads(x) for x in open("runs/smoke-secagg/rounds.jsonl")]
names = [p["name"] for p in r[0]["phases"]]
assert b["status"] == "completed" and "secagg-unmask" in names, (b["status"], names)
gap = max(abs(a["metrics"][k] - b["metrics"][k]) for k in a["metrics"])
if gap > 2e-3:
    sys.exit(f"FAILED: secure aggregation moved the metrics by {gap}")
print(f"SecAgg+: phases {names}, largest metric difference from the plain run {gap:.2e}")
PY

echo "== an unregistered SuperNode against the TLS SuperLink"
ssh-keygen -q -t ecdsa -b 384 -N "" -C stranger -f "$certs/stranger"
"${compose[@]}" -p "$project" -f compose.yaml -f docker/compose.tls.yaml up -d superlink \
  >"$logs/tls-refuse.log" 2>&1
link=$("${compose[@]}" -p "$project" -f compose.yaml -f docker/compose.tls.yaml ps -q superlink)
for _ in $(seq 1 120); do   # the SuperLink is up once its Control API answers
  docker exec "$link" python3 -c 'import socket; socket.create_connection(("127.0.0.1", 8000), 2)' 2>/dev/null && break
  sleep 1
done
network=$(docker network ls --format '{{.Name}}' | grep "^${project}_default$")
rc=0
# the Fleet API of the image's Flower line: superlink:8000 (1.42, HTTP) or superlink:9092 (1.39, gRPC)
fleet=$(docker run --rm --entrypoint python3 "$COROLLA_IMAGE" -c \
  'from flower_io import compat; print(compat.fleet_address("superlink", 8000, 9092))')
timeout 120 docker run --rm --network "$network" -v "$certs:/certs:ro" "$COROLLA_IMAGE" \
  flower-supernode --root-certificates /certs/ca.crt --auth-supernode-private-key /certs/stranger \
  --superlink "$fleet" --node-config 'clients="auto"' >"$logs/stranger.log" 2>&1 || rc=$?
if [ "$rc" -eq 0 ] || ! grep -q "code: 2004" "$logs/stranger.log" || ! grep -q "Exit Code: 305" "$logs/stranger.log"; then
  tail -20 "$logs/stranger.log"
  echo "FAILED: the unregistered SuperNode was not refused (exit code $rc)" >&2
  exit 1
fi
echo "unregistered SuperNode refused: container exit code $rc, $(grep -o '\[code: 2004\][^.]*' "$logs/stranger.log" | head -1), Flower exit code 305"
cleanup

echo "== metrics"
python3 - <<'PY'
import json
for name in ("smoke-3", "smoke-5", "smoke-tls", "smoke-secagg"):
    s = json.load(open(f"runs/{name}/summary.json"))
    rounds = [json.loads(x) for x in open(f"runs/{name}/rounds.jsonl")]
    per_round = [r["wall_s"] for r in rounds]
    print(f"{name}: {s['status']}, rounds {s['rounds_completed']}, round wall s {per_round}, "
          f"run wall {s['wall_s']:.1f} s")
    print(f"  metrics {json.dumps(s['metrics'])}")
PY
