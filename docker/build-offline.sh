#!/usr/bin/env bash
# Build Corolla's image on a machine that reaches PyPI and Debian's mirror but no container
# registry: a local base image made with debootstrap, a wheelhouse downloaded on the host, and
# the unchanged docker/Dockerfile with --build-arg BASE.
#
#   docker/build-offline.sh [IMAGE]        (default corolla:latest; COROLLA_BASE_IMAGE names the base)
#
# COROLLA_FLWR_LINE (1.42, the default, or 1.39) picks the Flower line: the wheelhouse is
# constraints/flwr-<line>.txt's tested set.
#
# Needs: docker (daemon running), debootstrap, python3 -m pip on the host (Python 3.11, as the
# bookworm base). Prints the build time and the image size.
set -euo pipefail
cd "$(dirname "$0")/.."
image=${1:-${COROLLA_IMAGE:-corolla:latest}}
base=${COROLLA_BASE_IMAGE:-corolla-base:bookworm}
line=${COROLLA_FLWR_LINE:-1.42}
[ -f "constraints/flwr-$line.txt" ] || { echo "COROLLA_FLWR_LINE=$line: no constraints/flwr-$line.txt (lines: 1.42, 1.39)" >&2; exit 2; }
t0=$(date +%s)
if ! docker image inspect "$base" >/dev/null 2>&1; then
  rootfs=$(mktemp -d)
  echo "building the base image $base (debootstrap bookworm, Python 3.11)"
  debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
    bookworm "$rootfs" >/dev/null
  tar -C "$rootfs" -c . | docker import - "$base" >/dev/null
  rm -rf "$rootfs"
fi
t1=$(date +%s)
echo "downloading the wheelhouse of the Flower $line line into docker/wheels/"
# exactly this tree's dependencies (the Dockerfile installs every wheel there): drop older downloads;
# the line's constraints pin torch to 2.13.0 too (without it pip picks a multi-GB CUDA build)
find docker/wheels -maxdepth 1 \( -name '*.whl' -o -name '*.tar.gz' \) -delete
python3 -m pip download -q -d docker/wheels -c "constraints/flwr-$line.txt" torch==2.13.0 setuptools wheel ".[all]" 2>&1 \
  | { grep -v "is ignored: it is neither a file nor a directory" || true; }
t2=$(date +%s)
docker build -q -f docker/Dockerfile --build-arg BASE="$base" --build-arg FLWR_LINE="$line" -t "$image" . >/dev/null
t3=$(date +%s)
size=$(docker image inspect "$image" --format '{{.Size}}')
echo "built $image (Flower $line line): base $((t1 - t0)) s, wheelhouse $((t2 - t1)) s ($(du -sm docker/wheels | cut -f1) MB), image build $((t3 - t2)) s, size $((size / 1000000)) MB"
