# libblob: make [CUDA=0] [V=1] | make check | make bench | make demo | make install
#
# CUDA builds are chosen when $(CUDA_HOME)/bin/nvcc exists (CUDA_HOME defaults to
# /usr/local/cuda); CUDA=0 builds a library with no CUDA dependency at all. Each build
# lives in its own directory, so both can coexist; BUILD_TAG names variants, e.g.
#   make CUDA=0 BUILD_TAG=-asan EXTRA_CFLAGS=-fsanitize=address EXTRA_LDFLAGS=-fsanitize=address test

CUDA_HOME ?= /usr/local/cuda
ifeq ($(origin CUDA), undefined)
CUDA := $(if $(wildcard $(CUDA_HOME)/bin/nvcc),1,0)
endif

PREFIX ?= /usr/local
PYTHON ?= python3
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig

VERSION := 0.1.0
SOVERSION := 0

CC ?= cc
NVCC := $(CUDA_HOME)/bin/nvcc
# sm_90 is the H100/H200; PTX for compute_90 lets newer GPUs JIT it.
CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90]

ifeq ($(V),1)
Q :=
else
Q := @
endif

BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
# DLPack's header <dlpack/dlpack.h> (Debian's libdlpack-dev) comes from the system include
# path, or from DLPACK_CFLAGS, e.g. make DLPACK_CFLAGS=-I/opt/dlpack/include.
DLPACK_CFLAGS ?=
BLAS_LIBS := $(shell pkg-config --libs openblas 2>/dev/null || echo -lopenblas)

WARN := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes
CFLAGS ?= -O2 -g
ALL_CFLAGS := -std=c11 -D_GNU_SOURCE $(WARN) -fPIC -fvisibility=hidden -DBLOB_BUILDING \
              -Iinclude $(BLAS_CFLAGS) $(DLPACK_CFLAGS) $(CFLAGS) $(EXTRA_CFLAGS)
LDLIBS_BASE := $(BLAS_LIBS) -lpthread -lm

ifeq ($(CUDA),1)
BUILD := build/cuda$(BUILD_TAG)
CUDA_CFLAGS := -I$(CUDA_HOME)/include
CUDA_LIBDIR := $(firstword $(wildcard $(CUDA_HOME)/lib64 $(CUDA_HOME)/lib))
CUDA_LIBS := -L$(CUDA_LIBDIR) -Wl,-rpath,$(CUDA_LIBDIR) -lcublas -lcudart -lstdc++
BACKEND_SRC := src/core/backend_cuda.c
KERNEL_SRC := $(wildcard src/kernels/*.cu)
KERNEL_C_SRC := $(filter-out src/kernels/none.c,$(wildcard src/kernels/*.c))
NVCCFLAGS ?= -O3
ALL_NVCCFLAGS := -std=c++17 $(CUDA_ARCH) -Iinclude -DBLOB_BUILDING \
                 -Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Wextra,-Werror $(NVCCFLAGS)
else
BUILD := build/cpu$(BUILD_TAG)
CUDA_CFLAGS :=
CUDA_LIBS :=
BACKEND_SRC := src/core/backend_none.c
KERNEL_SRC :=
KERNEL_C_SRC := src/kernels/none.c
endif

LIB_C_SRC := $(filter-out src/core/backend_cuda.c src/core/backend_none.c,$(wildcard src/core/*.c)) \
             $(BACKEND_SRC) $(wildcard src/alloc/*.c) $(wildcard src/syncedmem/*.c) \
             $(wildcard src/blob/*.c) $(wildcard src/math/*.c) $(wildcard src/interop/*.c) \
             $(KERNEL_C_SRC)
LIB_OBJ := $(LIB_C_SRC:%.c=$(BUILD)/%.o) $(KERNEL_SRC:%.cu=$(BUILD)/%.o)
LIB_LIBS := $(CUDA_LIBS) $(LDLIBS_BASE)

SHARED := $(BUILD)/libblob.so.$(VERSION)
STATIC := $(BUILD)/libblob.a

TEST_SRC := $(wildcard test/*.c)
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o)
TEST_BIN := $(BUILD)/test/blob_tests
CHECK_CFLAGS = $(shell pkg-config --cflags check 2>/dev/null)
CHECK_LIBS = $(shell pkg-config --libs check 2>/dev/null || echo -lcheck -lsubunit -lrt -lm)

.PHONY: all lib check test deps install uninstall clean bench demo install-check examples examples-check \
        dlpack-header python-check

all: lib

lib: $(SHARED) $(STATIC)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(ALL_CFLAGS) $(CUDA_CFLAGS) -MMD -MP -c $< -o $@

# Say what to install when DLPack's header is missing, before the compiler fails on it.
$(BUILD)/src/interop/%.o: | dlpack-header
dlpack-header:
	$(Q)printf '#include <dlpack/dlpack.h>\n' | $(CC) $(DLPACK_CFLAGS) -E -x c - >/dev/null 2>&1 || \
	    { echo "libblob needs DLPack's header <dlpack/dlpack.h>: make deps (Debian's" \
	        "libdlpack-dev), or point DLPACK_CFLAGS at it (DLPACK_CFLAGS=-I/its/include)" >&2; \
	      exit 1; }

$(BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  NVCC    $<")
	$(Q)$(NVCC) $(ALL_NVCCFLAGS) -MMD -MP -c $< -o $@

$(SHARED): $(LIB_OBJ)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) -shared -Wl,-soname,libblob.so.$(SOVERSION) -Wl,-z,defs $(EXTRA_LDFLAGS) -o $@ $(LIB_OBJ) $(LIB_LIBS)
	$(Q)ln -sf libblob.so.$(VERSION) $(BUILD)/libblob.so.$(SOVERSION)
	$(Q)ln -sf libblob.so.$(VERSION) $(BUILD)/libblob.so

$(STATIC): $(LIB_OBJ)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $(LIB_OBJ)

$(BUILD)/test/%.o: test/%.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(ALL_CFLAGS) $(CHECK_CFLAGS) -Wno-missing-prototypes -MMD -MP -c $< -o $@

# Tests link the static archive: they reach the internal backend table.
$(TEST_BIN): $(TEST_OBJ) $(STATIC)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(EXTRA_LDFLAGS) -o $@ $(TEST_OBJ) $(STATIC) $(CHECK_LIBS) $(LIB_LIBS)

# Benchmarks (bench/README.md); the GPU rows only in CUDA builds.
BENCH_SRC := bench/main.c bench/timing.c bench/report.c bench/api.c bench/dlpack.c \
             $(if $(filter 1,$(CUDA)),bench/gpu.c bench/conv.c,bench/gpu_none.c)
BENCH_OBJ := $(BENCH_SRC:%.c=$(BUILD)/%.o)
BENCH_BIN := $(BUILD)/bench/blob_bench

$(BENCH_BIN): $(BENCH_OBJ) $(STATIC)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(EXTRA_LDFLAGS) -o $@ $(BENCH_OBJ) $(STATIC) $(LIB_LIBS)

bench: $(BENCH_BIN) examples
	$(Q)$(BENCH_BIN) $(BENCH_ARGS)
	$(Q)$(EXAMPLES_BIN)/net_step --net mlp --net lenet --batch 64 --batch 256
	$(Q)BLOB_LIBRARY=$(CURDIR)/$(SHARED) $(PYTHON) bench/dlpack.py

# The packages of `check` (all of them); `demo` asks for its own, fewer.
deps:
	$(Q)sh tools/deps.sh check

test: $(TEST_BIN)
	$(Q)$(TEST_BIN)

# The README's test command: bring the dependencies, build, run the suite, then
# install into a temporary prefix and build a consumer with pkg-config.
check: deps
	$(Q)$(MAKE) --no-print-directory test
	$(Q)$(MAKE) --no-print-directory install-check
	$(Q)$(MAKE) --no-print-directory examples-check
	$(Q)$(MAKE) --no-print-directory python-check

install-check: lib
	$(Q)sh tools/install-check.sh "$(MAKE)" "$(CUDA)"

install: lib
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR)/blob $(DESTDIR)$(PKGCONFIGDIR)
	install -p -m 644 include/blob/*.h $(DESTDIR)$(INCLUDEDIR)/blob/
	install -m 755 $(SHARED) $(DESTDIR)$(LIBDIR)/
	ln -sf libblob.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libblob.so.$(SOVERSION)
	ln -sf libblob.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libblob.so
	install -m 644 $(STATIC) $(DESTDIR)$(LIBDIR)/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	    -e 's|@VERSION@|$(VERSION)|' -e 's|@LIBS_PRIVATE@|$(CUDA_LIBS) -lpthread -lm|' \
	    -e 's|@DLPACK_CFLAGS@|$(DLPACK_CFLAGS)|' \
	    blob.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/blob.pc

uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/libblob.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libblob.so.$(SOVERSION) \
	      $(DESTDIR)$(LIBDIR)/libblob.so $(DESTDIR)$(LIBDIR)/libblob.a \
	      $(DESTDIR)$(PKGCONFIGDIR)/blob.pc
	rm -rf $(DESTDIR)$(INCLUDEDIR)/blob

# The examples, built the way a user builds them: libblob installed into a private
# prefix, the programs compiled against it with pkg-config. Every install directory is
# given, and DESTDIR emptied, so none set by the caller can redirect this install.
EXAMPLES_PREFIX := $(CURDIR)/$(BUILD)/demo-prefix
EXAMPLES_BIN := $(CURDIR)/$(BUILD)/examples
EXAMPLES_DIRS := PREFIX=$(EXAMPLES_PREFIX) LIBDIR=$(EXAMPLES_PREFIX)/lib \
                 INCLUDEDIR=$(EXAMPLES_PREFIX)/include \
                 PKGCONFIGDIR=$(EXAMPLES_PREFIX)/lib/pkgconfig DESTDIR=

examples: lib
	$(Q)$(MAKE) --no-print-directory -s $(EXAMPLES_DIRS) install >/dev/null
	$(Q)PKG_CONFIG_PATH=$(EXAMPLES_PREFIX)/lib/pkgconfig$${PKG_CONFIG_PATH:+:$$PKG_CONFIG_PATH} \
	    $(MAKE) --no-print-directory $(if $(Q),-s) -C examples O=$(EXAMPLES_BIN)

# The README's first command: train a net (NET, default the MLP) on Fashion-MNIST, on the
# GPU when there is one. Options go in DEMO_ARGS, e.g. make demo NET=lenet DEMO_ARGS="--graph".
NET ?= mlp
demo:
	$(Q)sh tools/deps.sh demo
	$(Q)$(MAKE) --no-print-directory examples
	$(Q)$(EXAMPLES_BIN)/train --net $(NET) --out $(BUILD)/demo-out/$(NET) $(DEMO_ARGS)

# Layer gradient checks, CPU/GPU agreement, and short runs on a 2000-image slice: one
# epoch of the MLP and two of LeNet, each of which must reach 60% test accuracy.
examples-check: examples
	$(Q)$(EXAMPLES_BIN)/gradcheck
	$(Q)$(EXAMPLES_BIN)/train --limit 2000 --epochs 1 --lr 0.05 --min-accuracy 0.6 \
	    --out $(BUILD)/check-out
	$(Q)$(EXAMPLES_BIN)/train --net lenet --limit 2000 --epochs 2 --min-accuracy 0.6 \
	    --out $(BUILD)/check-out-lenet

# The Python module's tests against this build's library, then the DLPack example on
# the weights examples-check wrote. Tests needing NumPy, PyTorch, CuPy or a GPU are
# skipped, with a count, where those are missing.
python-check: lib
	$(Q)BLOB_LIBRARY=$(CURDIR)/$(SHARED) $(PYTHON) python/tests/run.py
	$(Q)BLOB_LIBRARY=$(CURDIR)/$(SHARED) $(PYTHON) python/examples/mlp_torch.py \
	    --weights $(BUILD)/check-out --check

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(BENCH_OBJ:.o=.d)
