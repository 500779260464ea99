#!/usr/bin/env bash
# The per-round cost on a lent GPU machine of the leaderboard rows too long for 2 CPU cores
# (issue 39; docs/results.md, "Rows too long for this machine"). Each row's preset runs in process
# (`corolla run --mode inproc --nodes 1`, the configuration of the earlier H100/H200 runs), all
# of them side by side, each stopped with SIGINT (a clean checkpoint) after LIMIT seconds; their
# per-round records (rounds.jsonl: wall and phases) come back as one archive.
#
# On the device machine (Python 3.12 with torch and CUDA, no network), from the repository root:
#   bash benchmarks/gpu_row_probes.sh [LIMIT_S]
# with Flower's wheels in .whl/ and the offline data files the presets read in .devdata/
# (both carried; neither is committed). Writes $OUT/probes.tar.gz and $OUT/machine.txt.
set -u
LIMIT=${1:-420}
OUT=${OUT:-/tmp/gpu-probes-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH COROLLA_OFFLINE=1 COROLLA_DATA=$PWD/.devdata
export COROLLA_CACHE=/tmp/corolla-cache PYTHONUNBUFFERED=1
{ nvidia-smi; nproc; free -g; python3 -c "import torch, numpy, flwr; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'numpy', numpy.__version__, 'flwr', flwr.__version__)"; } > "$OUT/machine.txt" 2>&1
R=/tmp/probes
mkdir -p $R
probe() {   # NAME PRESET [--set ...]
  local name=$1; shift
  ( OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 timeout -s INT -k 90 "$LIMIT" \
      python3 -c "import sys; from launcher.cli import main; sys.exit(main())" run --preset "$@" \
      --mode inproc --nodes 1 --data-dir "$COROLLA_DATA" --out "$R/$name" --quiet > "$R/$name.log" 2>&1
    echo "exit $?" >> "$R/$name.log" ) &
}
probe mf-waa fedavg-mf-ml100k-943
probe mf-gga gga-mf-ml100k-943
probe mf-cia fedcia-mf-ml100k-943
probe gpfedrec-lastfm2k gpfedrec-lastfm2k
probe fedlightgcn-lastfm2k fedlightgcn-ufgraphfr-lastfm2k
( while sleep 15; do echo "$(date +%s) $(nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader) $(free -m | awk '/Mem:/{print $3}')"; done ) > $R/usage.log 2>&1 &
USAGE=$!
wait $(jobs -p | grep -v "^$USAGE$") 2>/dev/null
kill $USAGE 2>/dev/null
cd $R && tar czf "$OUT/probes.tar.gz" --exclude='node-state' --exclude='*.npz' --exclude='*.pt' . 2>/dev/null
ls -la "$OUT"; tail -n 3 $R/*.log
