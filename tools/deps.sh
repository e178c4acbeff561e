#!/bin/sh
# Make sure the build and test dependencies are present. As root with apt-get, missing
# Debian packages are installed; otherwise the missing ones are named and we fail.
set -eu

missing=""
need() { # need PACKAGE TEST-COMMAND...
    pkg=$1
    shift
    "$@" >/dev/null 2>&1 || missing="$missing $pkg"
}

need pkg-config command -v pkg-config
need check pkg-config --exists check
need libsubunit-dev pkg-config --exists libsubunit
need libopenblas-dev pkg-config --exists openblas
need zlib1g-dev pkg-config --exists zlib
need make command -v make
need gcc command -v cc
need dataset-fashion-mnist sh -c '[ -n "${FASHION_MNIST_DIR:-}" ] || [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]'

if [ -n "$missing" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "deps: installing$missing"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq </dev/null
        # shellcheck disable=SC2086
        apt-get install -y -qq --no-install-recommends $missing </dev/null >/dev/null
    else
        echo "deps: missing Debian packages:$missing" >&2
        echo "deps: install them (sudo apt-get install$missing) or run make as root" >&2
        exit 1
    fi
fi

# numpy lets the .npy tests check files against numpy itself; they skip without it.
if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import numpy' >/dev/null 2>&1; then
    python3 -m pip install -q numpy </dev/null >/dev/null 2>&1 ||
        echo "deps: numpy unavailable: the numpy interoperability tests will be skipped"
fi
exit 0
