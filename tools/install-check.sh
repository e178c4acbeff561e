#!/bin/sh
# Install into a temporary prefix and build a consumer against it with pkg-config, the
# way a user would: shared, then fully static for libblob, then with the install moved
# elsewhere (pkg-config --define-prefix); then, on the moved install, consumers through
# the CMake package (blob::blob and blob::blob_static), skipped with a count where there
# is no cmake.
# Usage: install-check.sh MAKE CUDA
set -eu
make_cmd=$1
cuda=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# make GOAL... with every install directory under $tmp/usr and DESTDIR empty unless
# given after them, so that none the caller set (command line, environment) applies.
make_tmp() {
    $make_cmd --no-print-directory -s CUDA="$cuda" PREFIX="$tmp/usr" LIBDIR="$tmp/usr/lib" \
        INCLUDEDIR="$tmp/usr/include" PKGCONFIGDIR="$tmp/usr/lib/pkgconfig" DESTDIR= "$@" \
        >/dev/null
}
make_tmp install
make_tmp DESTDIR="$tmp/stage" install
[ -f "$tmp/stage$tmp/usr/include/blob/blob.h" ] || { echo "install-check: DESTDIR not honoured"; exit 1; }
# the caller's path keeps the dependencies' .pc files found (MKL's under the Python prefix)
deps_pc_path=${PKG_CONFIG_PATH:-}
export PKG_CONFIG_PATH="$tmp/usr/lib/pkgconfig${deps_pc_path:+:$deps_pc_path}"
cc=${CC:-cc}
# warnings are errors with WERROR=1, as in the library's own build
werror=
[ "${WERROR:-0}" = 1 ] && werror=-Werror

# shellcheck disable=SC2046
$cc -std=c11 -Wall $werror -o "$tmp/app" test/install/app.c $(pkg-config --cflags --libs blob)
LD_LIBRARY_PATH="$tmp/usr/lib" "$tmp/app"

# blob/dlpack.h builds with the same flags: DLPack's header is found in the system path
# shellcheck disable=SC2046
$cc -std=c11 -Wall $werror -o "$tmp/dlpack-app" test/install/dlpack_app.c $(pkg-config --cflags --libs blob)
LD_LIBRARY_PATH="$tmp/usr/lib" "$tmp/dlpack-app"

static_libs=$(pkg-config --static --libs blob | sed 's/-lblob/-l:libblob.a/')
# shellcheck disable=SC2046,SC2086
$cc -std=c11 -Wall $werror -o "$tmp/app-static" test/install/app.c $(pkg-config --cflags blob) $static_libs
if ldd "$tmp/app-static" | grep -q libblob; then
    echo "install-check: static consumer still links libblob.so"
    exit 1
fi
"$tmp/app-static"

# An unpacked install moved elsewhere: pkg-config --define-prefix takes the prefix from
# where blob.pc lies, and every directory follows it.
mv "$tmp/usr" "$tmp/moved"
moved_pc_path="$tmp/moved/lib/pkgconfig${deps_pc_path:+:$deps_pc_path}"
moved_includedir=$(PKG_CONFIG_PATH="$moved_pc_path" pkg-config --define-prefix \
    --variable=includedir blob)
if [ "$moved_includedir" != "$tmp/moved/include" ]; then
    echo "install-check: pkg-config --define-prefix gives includedir $moved_includedir," \
        "not $tmp/moved/include"
    exit 1
fi
# shellcheck disable=SC2046
$cc -std=c11 -Wall $werror -o "$tmp/app-moved" test/install/app.c \
    $(PKG_CONFIG_PATH="$moved_pc_path" pkg-config --define-prefix --cflags --libs blob)
LD_LIBRARY_PATH="$tmp/moved/lib" "$tmp/app-moved"

# test/install/CMakeLists.txt: find_package(blob CONFIG REQUIRED), app on blob::blob and
# app_static on blob::blob_static; the package finds its prefix from its own place.
if command -v cmake >/dev/null 2>&1; then
    CC=$cc cmake -S test/install -B "$tmp/cmake" -DCMAKE_PREFIX_PATH="$tmp/moved" \
        -DBLOB_WERROR="${WERROR:-0}" >/dev/null
    cmake --build "$tmp/cmake" >/dev/null
    if ldd "$tmp/cmake/app_static" | grep -q libblob; then
        echo "install-check: CMake's static consumer still links libblob.so"
        exit 1
    fi
    "$tmp/cmake/app"
    "$tmp/cmake/app_static"
    cmake_done=" and CMake"
else
    echo "install-check: cmake not found: 2 CMake consumers skipped (blob::blob," \
        "blob::blob_static); make deps installs it as root, or apt-get install cmake"
    cmake_done=" (CMake: 2 skipped)"
fi
mv "$tmp/moved" "$tmp/usr"

make_tmp uninstall
if [ -e "$tmp/usr/include/blob" ] || [ -e "$tmp/usr/lib/libblob.a" ] ||
    [ -e "$tmp/usr/lib/cmake/blob" ]; then
    echo "install-check: uninstall left files"
    exit 1
fi
echo "install-check: shared, static and relocated consumers built with pkg-config$cmake_done" \
    "and ran"
