#!/bin/sh
# What the docker compose stack needs before EMQX and the bridge start: a private CA, EMQX's server
# certificate (for its TLS listeners, 8883 and 8084) and the MQTT users EMQX imports at its first
# start. docker-compose.yml runs it once per `up` as the one-shot `setup` service; it is safe to
# run again (it keeps the CA and the certificate it made, and rewrites the users from the
# environment).
#
#   deploy/setup.sh CA_DIR SECRETS_DIR
#
# CA_DIR keeps ca.key (only this script sees it: sign device certificates with it, see
# docs/security.md). SECRETS_DIR gets tls/ca.pem, tls/server.pem, tls/server.key and
# emqx-users.csv, readable by EMQX's user (uid 1000) and by the bridge.
#
# Environment: HOOKBRIDGE_MQTT_PASSWORD (the bridge's own MQTT login), MQTT_DEVICE_PASSWORD (a first
# device user, `device1`), TLS_SERVER_NAMES (comma-separated DNS names the certificate is valid
# for; default emqx,localhost), SECRETS_OWNER (default 1000:1000, EMQX's user in its image).
set -eu

usage="usage: deploy/setup.sh CA_DIR SECRETS_DIR"
ca_dir=${1:?$usage}
secrets=${2:?$usage}
bridge_password=${HOOKBRIDGE_MQTT_PASSWORD:?HOOKBRIDGE_MQTT_PASSWORD must be set: the bridge logs in to EMQX with it}
device_password=${MQTT_DEVICE_PASSWORD:?MQTT_DEVICE_PASSWORD must be set: the first device logs in with it}
names=${TLS_SERVER_NAMES:-emqx,localhost}
owner=${SECRETS_OWNER:-1000:1000}

# EMQX reads the users file as CSV: a comma or a line break inside a password would cut it.
for password in "$bridge_password" "$device_password"; do
    case $password in
        *,* | *"
"*) echo "setup.sh: a password may not hold a comma or a line break (EMQX reads them from CSV)" >&2; exit 2 ;;
    esac
done

umask 077
mkdir -p "$ca_dir" "$secrets/tls"

if [ ! -s "$ca_dir/ca.key" ] || [ ! -s "$ca_dir/ca.pem" ]; then
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=hookbridge compose CA" \
        -keyout "$ca_dir/ca.key" -out "$ca_dir/ca.pem" 2>/dev/null
    rm -f "$secrets/tls/server.pem"  # a new CA: the old server certificate no longer verifies
fi
cp "$ca_dir/ca.pem" "$secrets/tls/ca.pem"

# The server certificate, made again when the names it must hold change.
san="subjectAltName=$(printf '%s' "$names" | sed 's/[^,][^,]*/DNS:&/g'),IP:127.0.0.1"
if [ ! -s "$secrets/tls/server.pem" ] || [ "$(cat "$secrets/tls/server.san" 2>/dev/null)" != "$san" ]; then
    first_name=${names%%,*}
    extensions=$(mktemp)
    printf '%s\nextendedKeyUsage=serverAuth\n' "$san" > "$extensions"
    openssl req -newkey rsa:2048 -nodes -subj "/CN=$first_name" \
        -keyout "$secrets/tls/server.key" -out "$secrets/tls/server.csr" 2>/dev/null
    openssl x509 -req -in "$secrets/tls/server.csr" -CA "$ca_dir/ca.pem" -CAkey "$ca_dir/ca.key" \
        -CAcreateserial -days 825 -extfile "$extensions" -out "$secrets/tls/server.pem" 2>/dev/null
    rm -f "$secrets/tls/server.csr" "$extensions"
    printf '%s' "$san" > "$secrets/tls/server.san"
fi

# EMQX's built-in database imports these at its first start (authentication.bootstrap_file in
# deploy/emqx/emqx.conf), hashing each password with the configured algorithm.
printf 'user_id,password,is_superuser\nhookbridge,%s,false\ndevice1,%s,false\n' \
    "$bridge_password" "$device_password" > "$secrets/emqx-users.csv"

chmod 644 "$secrets/tls/ca.pem" "$secrets/tls/server.pem"
chmod 600 "$secrets/tls/server.key" "$secrets/emqx-users.csv"
chmod 755 "$secrets" "$secrets/tls"
if [ "$(id -u)" = 0 ]; then
    chown -R "$owner" "$secrets"
fi
echo "setup.sh: CA, server certificate ($names) and EMQX users ready in $secrets"
