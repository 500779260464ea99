#!/usr/bin/env bash
# Certificates (and, for nodes on other machines, node keys) for a TLS SuperLink with SuperNode
# authentication.
#
#   docker/certs.sh [OUT_DIR] [NODE_KEYS] [EXTRA_SAN ...]
#
# Run it on the operator's machine: ca.key stays there. docker/compose.tls.yaml mounts only ca.crt
# into SuperNodes and submitters and server.pem/server.key into the SuperLink; its SuperNodes make
# their own keys. NODE_KEYS (default 0) key pairs are for SuperNodes started by hand elsewhere:
# give each machine its own private key and nothing else (docs/deployment.md).
#
# OUT_DIR (default docker/certs) receives
#   ca.crt, ca.key            a self-signed CA (ECDSA P-384), the root every client trusts
#   server.pem, server.key    the SuperLink's certificate, signed by the CA, with subjectAltNames
#                             DNS:superlink (the compose service), DNS:localhost, IP:127.0.0.1, the
#                             host's addresses (hostname -I) and every EXTRA_SAN ("DNS:link.example"
#                             or "IP:10.0.0.1")
#   keys/node<i>, keys/node<i>.pub   NODE_KEYS (default 0) ECDSA P-384 SuperNode key pairs in
#                             OpenSSH format, the format `flwr supernode register` takes
# Existing files are kept (rerun with a fresh OUT_DIR to rotate). Needs openssl and ssh-keygen.
set -euo pipefail
out=${1:-$(dirname "$0")/certs}
nodes=${2:-0}
shift $(( $# > 2 ? 2 : $# ))
mkdir -p "$out"
[ "$nodes" -eq 0 ] || mkdir -p "$out/keys"
cd "$out"
if [ ! -f ca.crt ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-384 -nodes -days 3650 \
    -keyout ca.key -out ca.crt -subj "/CN=Corolla CA" 2>/dev/null
fi
if [ ! -f server.pem ]; then
  san="DNS:superlink,DNS:localhost,IP:127.0.0.1"
  for ip in $(hostname -I 2>/dev/null || true); do
    case "$ip" in *:*) ;; *) san="$san,IP:$ip" ;; esac
  done
  for extra in "$@"; do san="$san,$extra"; done
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-384 -nodes -keyout server.key -out server.csr \
    -subj "/CN=superlink" 2>/dev/null
  printf 'subjectAltName=%s\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n' \
    "$san" > server.ext
  openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 825 \
    -extfile server.ext -out server.pem 2>/dev/null
  rm -f server.csr server.ext
  echo "SuperLink certificate: $san"
fi
for i in $(seq 0 $((nodes - 1))); do
  [ -f "keys/node$i" ] || ssh-keygen -q -t ecdsa -b 384 -N "" -C "corolla-node$i" -f "keys/node$i"
done
chmod 600 ca.key server.key keys/node* 2>/dev/null || true
chmod 644 keys/*.pub ca.crt server.pem 2>/dev/null || true
echo "certificates and $nodes node keys in $(pwd)"
