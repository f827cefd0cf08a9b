#!/bin/sh
# make-certs.sh: a private CA and the mTLS certificates of a sealed phasegate deployment.
#
#   deploy/make-certs.sh [--force] [--days N] OUT_DIR [NAME...]
#
# OUT_DIR/ca/ca.pem, ca.key       the CA; keep ca.key offline, never mount it anywhere
# OUT_DIR/temporal/               the Temporal server: tls.pem, tls.key, ca.pem
# OUT_DIR/<identity>/             one client identity each: tls.pem, tls.key, ca.pem
#
# Client identities: worker, verify, mcp, ui, admin (temporal-setup), operator (people's
# `phasegate` CLI on the host), plus any NAME given. Each service mounts only its own
# folder (docker-compose.sealed.yml); the agent's sandbox mounts none.
#
# Re-running keeps the CA and every identity that exists and adds the missing ones, so
# `make-certs.sh DIR alice` issues a certificate for one more person. --force starts over
# (new CA: every old certificate stops working).
#
# Folder modes: OUT_DIR is 0700, so no other user on the host can read any key. Inside
# it, each identity's files are world-readable on purpose: a bind mount shows only that
# folder to its container, whose own user (temporal, phasegate, ...) has some uid of its
# own that must be able to read the key.
set -eu

usage() {
    echo "usage: $0 [--force] [--days N] OUT_DIR [NAME...]" >&2
    echo "  e.g. $0 /srv/phasegate/certs        (see docs/sealed-deployment.md)" >&2
    exit 2
}

force=0
days=825
while [ $# -gt 0 ]; do
    case "$1" in
    --force) force=1; shift ;;
    --days) [ $# -ge 2 ] || usage; days=$2; shift 2 ;;
    -h | --help) usage ;;
    -*) echo "$0: unknown option $1" >&2; usage ;;
    *) break ;;
    esac
done
[ $# -ge 1 ] || usage
out=$1
shift
case "$days" in '' | *[!0-9]*) echo "$0: --days needs a number of days, got '$days'" >&2; exit 2 ;; esac

command -v openssl >/dev/null 2>&1 || {
    echo "$0: openssl not found; install it (Debian: apt-get install openssl)" >&2
    exit 1
}

# The Temporal server's names: the compose service name (what workers dial and what
# TEMPORAL_TLS_SERVER_NAME says), and localhost for clients on the host (port 7233).
server_sans="DNS:temporal,DNS:localhost,IP:127.0.0.1"
identities="worker verify mcp ui admin operator $*"

for name in $identities; do
    case "$name" in
    ca | temporal | *[!a-z0-9_-]* | -*)
        echo "$0: '$name' cannot name an identity (use lowercase letters, digits, - and _)" >&2
        exit 2
        ;;
    esac
done

umask 077
if [ "$force" = 1 ]; then
    rm -rf "$out/ca" "$out/temporal"
    for name in $identities; do rm -rf "${out:?}/$name"; done
fi
mkdir -p "$out"
chmod 0700 "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

if [ ! -f "$out/ca/ca.key" ]; then
    mkdir -p "$out/ca"
    key "$out/ca/ca.key"
    openssl req -new -x509 -sha256 -days "$days" -key "$out/ca/ca.key" -out "$out/ca/ca.pem" \
        -subj "/O=phasegate/CN=phasegate sealed deployment CA" \
        -addext "basicConstraints=critical,CA:TRUE,pathlen:0" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -addext "subjectKeyIdentifier=hash"
    echo "created CA          $out/ca/ca.pem (keep $out/ca/ca.key offline)"
fi

# issue NAME EXTENSIONS: OUT/NAME/{tls.key,tls.pem,ca.pem}, signed by the CA
issue() {
    dir="$out/$1"
    if [ -f "$dir/tls.pem" ] && [ -f "$dir/tls.key" ]; then
        echo "kept                $dir"
        return 0
    fi
    mkdir -p "$dir"
    key "$dir/tls.key"
    openssl req -new -sha256 -key "$dir/tls.key" -out "$tmp/$1.csr" -subj "/O=phasegate/CN=$1"
    printf '%s\n' "$2" >"$tmp/$1.ext"
    openssl x509 -req -sha256 -days "$days" -in "$tmp/$1.csr" -CA "$out/ca/ca.pem" \
        -CAkey "$out/ca/ca.key" -CAcreateserial -CAserial "$tmp/ca.srl" \
        -extfile "$tmp/$1.ext" -out "$dir/tls.pem" 2>/dev/null
    cp "$out/ca/ca.pem" "$dir/ca.pem"
    chmod 0755 "$dir"
    chmod 0644 "$dir/tls.pem" "$dir/ca.pem" "$dir/tls.key"
    echo "issued              $dir ($1)"
}

common="basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
authorityKeyIdentifier=keyid"
# The server certificate is also Temporal's internode client certificate, hence clientAuth.
issue temporal "$common
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=$server_sans"
for name in $identities; do
    issue "$name" "$common
extendedKeyUsage=clientAuth
subjectAltName=DNS:$name"
done
