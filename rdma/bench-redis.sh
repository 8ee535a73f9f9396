#!/usr/bin/env bash
# Installs Debian's redis-server for the Redis baseline of the rdma
# benchmark (BenchmarkLoopback starts its own instance on a free loopback
# port and stops it afterwards; without redis-server it skips that
# comparison). Run as root, or with sudo available, before `make bench`.
set -euo pipefail
if command -v redis-server >/dev/null; then
	exit 0
fi
sudo=""
if [ "$(id -u)" != 0 ]; then
	sudo="sudo"
fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server >/dev/null
# The package starts a system instance; the benchmark does not use it.
($sudo systemctl disable --now redis-server >/dev/null 2>&1 || $sudo service redis-server stop >/dev/null 2>&1) || true
