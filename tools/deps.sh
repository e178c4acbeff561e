#!/bin/sh
# Make sure the dependencies of a make target are present:
#   [BLAS=openblas|blis|mkl] [PYTHON=python3] sh tools/deps.sh [check|demo|fuzz|format]
# check (the default): everything, the test suite's Check and subunit and python3 (which
# generates the test of NULL arguments) included, and cmake (for the install check's
# CMake consumers, which are skipped without it) where it can be installed;
# demo: the compiler, pkg-config, the host BLAS, zlib, DLPack's header and the dataset;
# fuzz: those of demo but the dataset, and clang ($FUZZ_CC) with its libFuzzer runtime;
# format: clang-format alone.
# The host BLAS is the Makefile's BLAS: OpenBLAS (libopenblas-dev), BLIS (libblis-dev) or
# MKL (PyPI's mkl-devel, installed with pip for $PYTHON like numpy).
# As root with apt-get, missing Debian packages are installed; otherwise the missing ones
# are named and we fail.
set -eu

mode=${1:-check}
blas=${BLAS:-openblas}
python=${PYTHON:-python3}
case $mode in
check | demo | fuzz) ;;
format)
    command -v clang-format >/dev/null 2>&1 && exit 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "deps: installing clang-format"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq </dev/null
        apt-get install -y -qq --no-install-recommends clang-format </dev/null >/dev/null
        exit 0
    fi
    echo "deps: missing clang-format (sudo apt-get install clang-format)" >&2
    exit 1
    ;;
*)
    echo "usage: [BLAS=openblas|blis|mkl] sh tools/deps.sh [check|demo|fuzz|format]" >&2
    exit 2
    ;;
esac
case $blas in
openblas | blis | mkl) ;;
*)
    echo "deps: BLAS=$blas: openblas, blis or mkl" >&2
    exit 2
    ;;
esac

can_install() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; }

fuzz_cc=${FUZZ_CC:-clang}
# Whether fuzz_cc links a libFuzzer target under ASan and UBSan.
fuzzer_works() {
    dir=$(mktemp -d)
    printf '%s\n' '#include <stddef.h>' \
        'int LLVMFuzzerTestOneInput(const unsigned char *d, size_t n) { (void)d; (void)n; return 0; }' \
        >"$dir/t.c"
    ok=false
    "$fuzz_cc" -fsanitize=fuzzer,address,undefined -o "$dir/t" "$dir/t.c" >/dev/null 2>&1 && ok=true
    rm -rf "$dir"
    $ok
}

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
if [ "$mode" != fuzz ]; then
    # shellcheck disable=SC2016 # expanded by the inner shell
    need dataset-fashion-mnist sh -c '[ -n "${FASHION_MNIST_DIR:-}" ] || [ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]'
fi
if [ "$mode" = check ]; then
    need python3 command -v python3
    if can_install; then
        need cmake command -v cmake
    fi
fi
if [ "$blas" = blis ]; then
    need libblis-dev sh -c 'printf "#include <blis.h>\n" | cc -E -x c - >/dev/null'
fi
if $have_pkg_config; then
    if [ "$blas" = openblas ]; then
        need libopenblas-dev pkg-config --exists openblas
    fi
    need zlib1g-dev pkg-config --exists zlib
    if [ "$mode" = check ]; then
        need check pkg-config --exists check
        need libsubunit-dev pkg-config --exists libsubunit
    fi
fi
# clang and its runtime: the runtime package is named after clang's major version.
if [ "$mode" = fuzz ] && ! fuzzer_works; then
    if can_install && [ "$fuzz_cc" = clang ]; then
        command -v clang >/dev/null 2>&1 || apt_install clang
        major=$(clang -dumpversion | cut -d. -f1)
        apt_install "libclang-rt-$major-dev" || true
    fi
    if ! fuzzer_works; then
        echo "deps: $fuzz_cc cannot build libFuzzer targets (-fsanitize=fuzzer,address,undefined)." >&2
        echo "deps: on Debian: apt-get install clang libclang-rt-N-dev (N: clang's major version)," \
            "or set FUZZ_CC to a clang that has its fuzzer runtime" >&2
        exit 1
    fi
fi

if [ -n "$missing" ]; then
    if can_install; then
        # shellcheck disable=SC2086
        apt_install $missing
    else
        echo "deps: missing Debian packages:$missing" >&2
        if ! $have_pkg_config; then
            libs=$([ "$blas" = openblas ] && echo "OpenBLAS, zlib" || echo zlib)
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

# MKL: PyPI's mkl-devel, whose .pc files lie in the Python prefix's lib/pkgconfig (where
# the Makefile looks for them).
have_mkl() {
    PKG_CONFIG_PATH="$("$python" -c 'import sys; print(sys.prefix)')/lib/pkgconfig" \
        pkg-config --exists mkl-dynamic-lp64-gomp
}
if [ "$blas" = mkl ] && ! have_mkl >/dev/null 2>&1; then
    echo "deps: installing mkl-devel with pip"
    timeout 900 "$python" -m pip install -q mkl-devel </dev/null >/dev/null 2>&1 || true
    if ! have_mkl >/dev/null 2>&1; then
        echo "deps: BLAS=mkl needs MKL: $python -m pip install mkl-devel failed (or left no" \
            "mkl-dynamic-lp64-gomp.pc under the Python prefix)" >&2
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
