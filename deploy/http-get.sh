#!/bin/bash
# keel-http-get PORT [PATH]: GET http://127.0.0.1:PORT/PATH with bash's /dev/tcp (the
# minbase image has no curl). Prints the response body; exits 0 only on HTTP 200.
# Used by the compose healthchecks (`keel-http-get 9400 /health/ready`) and deploy/smoke.sh.
set -u
port="${1:?usage: keel-http-get PORT [PATH]}"
path="${2:-/health/ready}"
exec 3<>"/dev/tcp/127.0.0.1/$port" || exit 2
printf 'GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n' "$path" >&3
IFS= read -r status <&3 || exit 2
# Skip the headers, print the body.
while IFS= read -r line <&3; do
    [ "$line" = $'\r' ] || [ -z "$line" ] && break
done
cat <&3
exec 3<&-
case "$status" in
    "HTTP/1."?" 200 "*) exit 0 ;;
    *) exit 1 ;;
esac
