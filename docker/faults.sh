#!/usr/bin/env bash
# The compose fault drills of docs/deployment.md, run once and summarised (needs the image:
# docker/build-offline.sh). Exit code non-zero when an outcome is not the documented one.
#
#   COROLLA_DATA=/path/to/datasets docker/faults.sh
#
# A. a SuperNode container killed mid-run, then started again: the run completes;
# B. the SuperLink restarted mid-run: the submission fails; resuming from the checkpoint on the
#    results volume completes the run with the metrics of an uninterrupted run (in process).
set -euo pipefail
cd "$(dirname "$0")/.."
export COROLLA_DATA=${COROLLA_DATA:?set COROLLA_DATA to the dataset folder (layout: corolla/data/sources.py)}
export COROLLA_PRESET=fedavg-mf-ml100k COROLLA_OFFLINE=1 COROLLA_NODES=3
if docker compose version >/dev/null 2>&1; then compose=(docker compose); else compose=(docker-compose); fi
p=corolla-faults
dc() { "${compose[@]}" -p "$p" "$@"; }
logs=$(mktemp -d)
trap 'dc down -v >/dev/null 2>&1 || true' EXIT
mkdir -p runs

wait_for() {  # file text seconds
  for _ in $(seq 1 "$3"); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 1; done
  echo "FAILED: '$2' not in $1 after $3 s" >&2; return 1
}

echo "== A: a SuperNode killed at round 2 and started again at round 5 (8 rounds)"
rm -rf runs/faults-node
COROLLA_ROUNDS=8 COROLLA_RUN_NAME=faults-node dc up -d --no-build --scale supernode=3 >"$logs/a.log" 2>&1
wait_for runs/faults-node/rounds.log "round   2/" 300
victim=$(dc ps -q supernode | head -1)
docker kill "$victim" >/dev/null
echo "killed $(docker inspect -f '{{.Name}}' "$victim") after round 2"
wait_for runs/faults-node/rounds.log "round   5/" 600
docker start "$victim" >/dev/null
echo "started it again after round 5"
rc=$(docker wait "$(dc ps -q run)")
dc logs --no-color >"$logs/a-compose.log" 2>&1 || true
dc down -v >/dev/null 2>&1
python3 - "$rc" <<'PY'
import json, sys
rc = int(sys.argv[1])
s = json.load(open("runs/faults-node/summary.json"))
rounds = [json.loads(x) for x in open("runs/faults-node/rounds.jsonl")]
print(f"run exit code {rc}, status {s['status']}, rounds {s['rounds_completed']}")
for r in rounds:
    ph = r["phases"][0]
    print(f"  round {r['round']}: clients {r['clients']}, replies {ph['replies']}, excluded {len(ph['excluded'])}, "
          f"test users {r.get('users', {}).get('test')}, wall {r['wall_s']:.1f} s")
assert rc == 0 and s["status"] == "completed" and s["rounds_completed"] == 8
assert any(r["phases"][0]["excluded"] for r in rounds), "no round lost the killed node's clients"
assert rounds[-1]["phases"][0]["replies"] == 3 and rounds[-1]["clients"] == 100, "the node did not rejoin"
PY

echo "== B: the SuperLink restarted at round 2 (5 rounds), then --resume"
rm -rf runs/faults-link
COROLLA_ROUNDS=5 COROLLA_RUN_NAME=faults-link dc up -d --no-build --scale supernode=3 >"$logs/b.log" 2>&1
wait_for runs/faults-link/rounds.log "round   2/" 300
dc restart superlink >/dev/null 2>&1
echo "restarted the SuperLink after round 2"
rc=$(docker wait "$(dc ps -q run)")
echo "submission exit code after the restart: $rc"
[ "$rc" -ne 0 ] || { echo "FAILED: the interrupted submission exited 0" >&2; exit 1; }
done_rounds=$(wc -l < runs/faults-link/rounds.jsonl)
echo "rounds recorded before the restart: $done_rounds"
rc=0
COROLLA_RESUME=faults-link dc run --rm --no-deps run >"$logs/b-resume.log" 2>&1 || rc=$?
tail -3 "$logs/b-resume.log"
dc down -v >/dev/null 2>&1
corolla_cli=$(command -v corolla || echo .venv/bin/corolla)   # the host install (README's set-up)
"$corolla_cli" run --preset fedavg-mf-ml100k --mode inproc --nodes 3 --set num-rounds=5 --data-dir "$COROLLA_DATA" \
  --out "$logs/reference" >/dev/null
python3 - "$rc" "$logs/reference/summary.json" <<'PY'
import json, sys
rc, ref = int(sys.argv[1]), json.load(open(sys.argv[2]))
s = json.load(open("runs/faults-link/summary.json"))
print(f"resume exit code {rc}, status {s['status']}, rounds {s['rounds_completed']}; "
      f"metrics equal to the uninterrupted in-process run: {s['metrics'] == ref['metrics']}")
assert rc == 0 and s["status"] == "completed" and s["metrics"] == ref["metrics"]
PY
echo "fault drills: all outcomes as documented"
