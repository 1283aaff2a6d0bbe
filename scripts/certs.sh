#!/usr/bin/env bash
# certs.sh DIR [NAME...]: a CA and certificates for NATS's TLS overlay
# (deploy/compose.tls.yaml) and the routes between a cluster's servers
# (compose.cluster.yaml, stack.cluster.yaml), for a test or a first
# setup; an operator can bring their own instead. In DIR:
#   ca.pem, ca-key.pem          the CA (keep ca-key.pem offline)
#   server.pem, server-key.pem  the servers', for NAMEs (default: nats,
#                               nats-2, nats-3, localhost) and 127.0.0.1;
#                               a server also shows it on the routes it
#                               opens, so it serves as a client's too
#   client.pem, client-key.pem  a client certificate, for mutual TLS
# Workers on other hosts need ca.pem (-tlsca or NATS_CA_FILE) and the
# server's name or address among the NAMEs.
set -euo pipefail
dir=${1:?usage: certs.sh DIR [NAME...]}
shift
names=("${@:-nats}")
[ $# -gt 0 ] || names+=(nats-2 nats-3 localhost)
mkdir -p "$dir"
cd "$dir"
san="IP:127.0.0.1"
for n in "${names[@]}"; do san="$san,DNS:$n"; done
days=825
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca-key.pem -out ca.pem -days "$days" -subj "/CN=osgm NATS CA" 2>/dev/null
issue() { # name subject extensions
	openssl req -newkey rsa:2048 -nodes -keyout "$1-key.pem" -out "$1.csr" -subj "$2" 2>/dev/null
	openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca-key.pem -CAcreateserial -out "$1.pem" -days "$days" \
		-extfile <(printf '%s\n' "$3") 2>/dev/null
	rm -f "$1.csr"
}
issue server "/CN=${names[0]}" "subjectAltName=$san
extendedKeyUsage=serverAuth,clientAuth"
issue client "/CN=osgm client" "extendedKeyUsage=clientAuth"
rm -f ca.srl
# The server's and clients' keys are read by the containers' users.
chmod 644 ./*.pem
echo "wrote $dir: ca.pem, server.pem/server-key.pem (${san}), client.pem/client-key.pem"
