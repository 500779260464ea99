#!/usr/bin/env bash
# Build Corolla's image on a machine that reaches PyPI and Debian's mirror but no container
# registry: a local base image made with debootstrap, a wheelhouse downloaded on the host, and
# the unchanged docker/Dockerfile with --build-arg BASE.
#
#   docker/build-offline.sh [IMAGE]        (default corolla:latest; COROLLA_BASE_IMAGE names the base)
#
# Needs: docker (daemon running), debootstrap, python3 -m pip on the host (Python 3.11, as the
# bookworm base). Prints the build time and the image size.
set -euo pipefail
cd "$(dirname "$0")/.."
image=${1:-${COROLLA_IMAGE:-corolla:latest}}
base=${COROLLA_BASE_IMAGE:-corolla-base:bookworm}
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
constraints=$(mktemp)
echo "torch==2.13.0" > "$constraints"   # without it pip picks a multi-GB CUDA build
echo "downloading the wheelhouse into docker/wheels/"
# exactly this tree's dependencies (the Dockerfile installs every wheel there): drop older downloads
find docker/wheels -maxdepth 1 \( -name '*.whl' -o -name '*.tar.gz' \) -delete
python3 -m pip download -q -d docker/wheels -c "$constraints" torch==2.13.0 setuptools wheel ".[all]" 2>&1 \
  | { grep -v "is ignored: it is neither a file nor a directory" || true; }
rm -f "$constraints"
t2=$(date +%s)
docker build -q -f docker/Dockerfile --build-arg BASE="$base" -t "$image" . >/dev/null
t3=$(date +%s)
size=$(docker image inspect "$image" --format '{{.Size}}')
echo "built $image: base $((t1 - t0)) s, wheelhouse $((t2 - t1)) s ($(du -sm docker/wheels | cut -f1) MB), image build $((t3 - t2)) s, size $((size / 1000000)) MB"
