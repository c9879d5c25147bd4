#!/usr/bin/env bash
# Install Debian's Chromium and its WebDriver for the report's browser tests (tests marked `browser`).
# Selenium drives /usr/bin/chromedriver directly: nothing is downloaded besides these packages.
# Idempotent: does nothing when both are there. Needs root (CI and the dev machines run as root).
set -euo pipefail
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq chromium chromium-driver >/dev/null
/usr/bin/chromium --version
