#!/bin/sh
# Make sure the dependencies of a make target are present:
#   sh tools/deps.sh [check|demo]
# check (the default): everything, the test suite's Check and subunit included;
# demo: the compiler, pkg-config, OpenBLAS, zlib, DLPack's header and the dataset. As root with apt-get,
# missing Debian packages are installed; otherwise the missing ones are named and we fail.
set -eu

mode=${1:-check}
case $mode in
check | demo) ;;
*)
    echo "usage: sh tools/deps.sh [check|demo]" >&2
    exit 2
    ;;
esac

can_install() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; }

apt_install() { # apt_install PACKAGE...
    echo "deps: installing $*"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq </dev/null
    apt-get install -y -qq --no-install-recommends "$@" </dev/null >/dev/null
}

missing=""
need() { # need PACKAGE TEST-COMMAND...
    pkg=$1
    shift
    "$@" >/dev/null 2>&1 || missing="$missing $pkg"
}

# The libraries are probed with pkg-config, so it comes first: without it every probe
# would fail and name a package that may well be installed.
have_pkg_config=true
if ! command -v pkg-config >/dev/null 2>&1; then
    if can_install; then
        apt_install pkg-config
    else
        have_pkg_config=false
        missing=" pkg-config"
    fi
fi

need gcc command -v cc
# shellcheck disable=SC2016 # expanded by the inner shell
need libdlpack-dev sh -c 'printf "#include <dlpack/dlpack.h>\n" | cc ${DLPACK_CFLAGS:-} -E -x c - >/dev/null'
# shellcheck disable=SC2016 # expanded by the inner shell
need dataset-fashion-mnist sh -c '[ -n "${FASHION_MNIST_DIR:-}" ] || [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]'
if $have_pkg_config; then
    need libopenblas-dev pkg-config --exists openblas
    need zlib1g-dev pkg-config --exists zlib
    if [ "$mode" = check ]; then
        need check pkg-config --exists check
        need libsubunit-dev pkg-config --exists libsubunit
    fi
fi

if [ -n "$missing" ]; then
    if can_install; then
        # shellcheck disable=SC2086
        apt_install $missing
    else
        echo "deps: missing Debian packages:$missing" >&2
        if ! $have_pkg_config; then
            libs="OpenBLAS, zlib"
            if [ "$mode" = check ]; then
                libs="$libs, Check, subunit"
            fi
            echo "deps: the libraries ($libs) are probed once pkg-config is installed" >&2
        fi
        if command -v apt-get >/dev/null 2>&1; then
            echo "deps: install them (sudo apt-get install$missing) or run make as root" >&2
        else
            echo "deps: there is no apt-get here: install the equivalent packages with this" \
                "system's package manager" >&2
        fi
        case $missing in
        *dataset-fashion-mnist*)
            echo "deps: or point FASHION_MNIST_DIR at a directory holding the Fashion-MNIST" \
                ".gz files" >&2
            ;;
        esac
        exit 1
    fi
fi

# numpy lets the .npy tests of the suite check files against numpy itself; they are
# skipped without it, so failing to get it is not an error.
if [ "$mode" = check ] && command -v python3 >/dev/null 2>&1 &&
    ! python3 -c 'import numpy' >/dev/null 2>&1; then
    timeout 120 python3 -m pip install -q numpy </dev/null >/dev/null 2>&1 ||
        echo "deps: numpy (for the tests that check .npy files against numpy) could not be" \
            "installed: those tests will be skipped"
fi
exit 0
