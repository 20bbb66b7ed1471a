#!/usr/bin/env bash
# redis-server for the Redis memory tests (tests/redis_support.py): Debian's `redis-server`
# package, installed with apt-get when run as root. The tests start their own server on a free
# loopback port, so the system service is not needed. Elsewhere this says in one line why not and
# those tests skip; under CI=true it fails instead.
set -u
SERVER="${COGRAG_REDIS_SERVER:-/usr/bin/redis-server}"
[ -x "$SERVER" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  if apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; then
    exit 0
  fi
  echo "redis-server: apt-get install failed; the Redis memory tests will skip" >&2
else
  echo "redis-server: not installed and not root (run 'apt-get install redis-server' as root); the Redis memory tests will skip" >&2
fi
[ "${CI:-}" = true ] && exit 1
exit 0
