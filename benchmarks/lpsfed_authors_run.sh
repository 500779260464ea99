#!/usr/bin/env bash
# Runs the LPSFed authors' code (a checkout prepared by lpsfed_authors_setup.py) over partitions x
# seeds for LPSFed and its FedAvg-LGCN row, one thread per process, one log per run.
#   benchmarks/lpsfed_authors_run.sh CHECKOUT PYTHON DATASET_INDEX DATASET_NAME LOGDIR "P..." "S..."
# e.g.  benchmarks/lpsfed_authors_run.sh ../LPSFed venv/bin/python 5 ML-100K logs "0 1" "0 1 2"
# METHODS="lpsfed" (or "fedavg") runs one of the two. Each partition is a fresh run of their make_subgraph.py (its clustering is unseeded) and their
# subgraph_embeddings_gpu.py, kept in data/NAME/4_clients-pP and linked as 4_clients for its runs.
set -euo pipefail
co=$(cd "$1" && pwd); py=$2; ds=$3; name=$4; logs=$(mkdir -p "$5" && cd "$5" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 LPSFED_DATASET=$ds LPSFED_DATASET_NAME=$name LPSFED_GLOBAL_UPDATE_EPOCH=5
for p in $6; do
  d=$co/data/$name
  if [ ! -d "$d/4_clients-p$p" ]; then
    rm -rf "$d/4_clients"; mkdir -p "$d/4_clients"
    (cd "$co/src/utils" && "$py" "$here/lpsfed_authors_utils.py" make_subgraph.py && "$py" subgraph_embeddings_gpu.py) > "$logs/partition-p$p.log" 2>&1
    mv "$d/4_clients" "$d/4_clients-p$p"
  fi
  ln -sfn "4_clients-p$p" "$d/4_clients"
  for s in $7; do
    for m in ${METHODS:-lpsfed fedavg}; do
      loss=BC; [ $m = fedavg ] && loss=BPR
      log=$logs/$m-p$p-s$s.log
      [ -s "$log" ] && grep -q '=== Final Results ===' "$log" && continue
      (cd "$co/src" && mkdir -p result experiment_result && LPSFED_SEED=$s LPSFED_FED_METHOD=$m LPSFED_LOSS=$loss \
        /usr/bin/time -v "$py" -u main.py) > "$log" 2>&1 || true
      echo "$(date +%T) $m p$p s$s: $(grep -c '^ROUND' "$log") round lines"
    done
  done
done
