#!/usr/bin/env bash
# Chromium for the browser test (tests/test_web_browser.py): Debian's `chromium` package (plus a
# CJK font, so the Chinese page renders), installed with apt-get when run as root. Elsewhere this
# says in one line why not and the browser test skips; under CI=true it fails instead.
set -u
CHROMIUM="${COGRAG_CHROMIUM:-/usr/bin/chromium}"
[ -x "$CHROMIUM" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  if apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-wqy-microhei >/dev/null; then
    exit 0
  fi
  echo "chromium: apt-get install failed; the browser test will skip" >&2
else
  echo "chromium: not installed and not root (run 'apt-get install chromium' as root); the browser test will skip" >&2
fi
[ "${CI:-}" = true ] && exit 1
exit 0
