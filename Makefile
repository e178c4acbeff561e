# libblob: make [CUDA=0] [V=1] | make check | make bench | make bench-comm | make bench-dp |
#          make bench-trace | make demo | make install | make fuzz [FUZZ_SECONDS=60]
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
BINDIR ?= $(PREFIX)/bin

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

# The host BLAS: BLAS=openblas (the default; Debian's libopenblas-dev), blis (libblis-dev)
# or mkl (PyPI's mkl-devel, with GNU OpenMP; make BLAS=mkl deps fetches it), found by
# pkg-config under the names listed after each macro below. MKL's .pc files lie under
# the Python prefix, which joins PKG_CONFIG_PATH, and libblob finds MKL there by an rpath.
# Without a .pc file the library is linked by its name, BLIS's cblas.h taken beside the
# blis.h that Debian's alternatives chose (Debian 12's BLIS ships no .pc file). Its
# headers are included as system headers (BLIS's cblas.h is not written for -Wextra).
# Builds with different BLASes need distinct BUILD_TAGs.
BLAS ?= openblas
blas.openblas := OPENBLAS openblas
blas.blis := BLIS blis blis-openmp blis-pthread blis-serial
blas.mkl := MKL mkl-dynamic-lp64-gomp
ifeq ($(blas.$(BLAS)),)
$(error BLAS=$(BLAS): openblas, blis or mkl)
endif
ifeq ($(BLAS),mkl)
export PKG_CONFIG_PATH := $(shell $(PYTHON) -c 'import sys; print(sys.prefix)' 2>/dev/null)/lib/pkgconfig$(if $(PKG_CONFIG_PATH),:$(PKG_CONFIG_PATH))
endif
# pkg-config ARGS with that path ($(shell) does not see the makefile's exports)
blas_pkg_config = $(shell PKG_CONFIG_PATH='$(PKG_CONFIG_PATH)' pkg-config $(1) 2>/dev/null)
BLAS_PC := $(firstword $(foreach p,$(wordlist 2,9,$(blas.$(BLAS))),$(call blas_pkg_config,--exists $(p) && echo $(p))))
ifeq ($(BLAS),mkl)
BLAS_RPATH := -Wl,-rpath,$(realpath $(call blas_pkg_config,--variable=libdir $(BLAS_PC)))
endif
BLAS_CFLAGS := -DBLOB_BLAS_$(firstword $(blas.$(BLAS))) $(patsubst -I%,-isystem %,\
               $(if $(BLAS_PC),$(call blas_pkg_config,--cflags $(BLAS_PC)),$(if $(filter blis,$(BLAS)),\
               $(patsubst %,-I%,$(dir $(realpath /usr/include/$(shell $(CC) -print-multiarch)/blis.h))))))
BLAS_LIBS := $(if $(BLAS_PC),$(call blas_pkg_config,--libs $(BLAS_PC)),-l$(BLAS)) $(BLAS_RPATH)
# DLPack's header <dlpack/dlpack.h> (Debian's libdlpack-dev) comes from the system include
# path, or from DLPACK_CFLAGS, e.g. make DLPACK_CFLAGS=-I/opt/dlpack/include.
DLPACK_CFLAGS ?=

# Warnings are errors with WERROR=1 (CI sets it), so that a newer compiler's new warning
# does not break a user's build.
WERROR ?= 0
export WERROR
werror = $(if $(filter 1,$(WERROR)),$(1))
comma := ,
WARN := -Wall -Wextra $(call werror,-Werror) -Wshadow -Wstrict-prototypes -Wmissing-prototypes
CFLAGS ?= -O2 -g
ALL_CFLAGS := -std=c11 -D_GNU_SOURCE $(WARN) -fPIC -fvisibility=hidden -DBLOB_BUILDING \
              -Iinclude $(BLAS_CFLAGS) $(DLPACK_CFLAGS) $(CFLAGS) $(EXTRA_CFLAGS)
LDLIBS_BASE := $(BLAS_LIBS) -lpthread -lm

ifeq ($(CUDA),1)
BUILD := build/cuda$(BUILD_TAG)
CUDA_CFLAGS := -I$(CUDA_HOME)/include
CUDA_LIBDIR := $(firstword $(wildcard $(CUDA_HOME)/lib64 $(CUDA_HOME)/lib))
CUDA_LIBS := -L$(CUDA_LIBDIR) -Wl,-rpath,$(CUDA_LIBDIR) -lcublasLt -lcublas -lcudart -lstdc++
BACKEND_SRC := src/core/backend_cuda.c
BACKEND_CU_SRC := src/core/backend_cuda_copy.cu
KERNEL_SRC := $(wildcard src/kernels/*.cu)
KERNEL_C_SRC := $(filter-out src/kernels/none.c,$(wildcard src/kernels/*.c))
NVCCFLAGS ?= -O3
ALL_NVCCFLAGS := -std=c++17 $(CUDA_ARCH) -Iinclude -DBLOB_BUILDING \
                 -Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Wextra$(call werror,$(comma)-Werror) \
                 $(NVCCFLAGS)
else
BUILD := build/cpu$(BUILD_TAG)
CUDA_CFLAGS :=
CUDA_LIBS :=
BACKEND_SRC := src/core/backend_none.c
BACKEND_CU_SRC :=
KERNEL_SRC :=
KERNEL_C_SRC := src/kernels/none.c
endif

# NCCL, for communicators of several ranks (include/blob/comm.h): used by CUDA builds when
# nccl.h and libnccl.so are found in NCCL_HOME, the toolkit or the system. NCCL=0 leaves
# it out; NCCL_CFLAGS and NCCL_LIBS replace what is found. Without it comm.h still works
# for one rank. A build with and one without NCCL need distinct BUILD_TAGs.
ifeq ($(CUDA),1)
NCCL_HEADER := $(firstword $(wildcard $(if $(NCCL_HOME),$(NCCL_HOME)/include/nccl.h) \
               $(CUDA_HOME)/include/nccl.h /usr/local/include/nccl.h /usr/include/nccl.h))
NCCL_LIBFILE := $(firstword $(wildcard $(if $(NCCL_HOME),$(NCCL_HOME)/lib64/libnccl.so \
                $(NCCL_HOME)/lib/libnccl.so) $(CUDA_LIBDIR)/libnccl.so /usr/local/lib/libnccl.so \
                /usr/lib/x86_64-linux-gnu/libnccl.so /usr/lib64/libnccl.so /usr/lib/libnccl.so))
NCCL ?= $(if $(and $(NCCL_HEADER),$(NCCL_LIBFILE)),1,0)
else
override NCCL := 0
endif
ifeq ($(NCCL),1)
NCCL_INCDIR := $(patsubst %/,%,$(dir $(NCCL_HEADER)))
NCCL_LIBDIR := $(patsubst %/,%,$(dir $(NCCL_LIBFILE)))
# -isystem: nccl.h is not written for -Wstrict-prototypes
NCCL_CFLAGS ?= $(if $(filter-out /usr/include,$(NCCL_INCDIR)),-isystem $(NCCL_INCDIR))
NCCL_LIBS ?= $(if $(filter-out $(CUDA_LIBDIR) /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib,$(NCCL_LIBDIR)),\
             -L$(NCCL_LIBDIR) -Wl$(comma)-rpath$(comma)$(NCCL_LIBDIR)) -lnccl
CCL_SRC := src/comm/ccl_nccl.c
else
NCCL_CFLAGS :=
NCCL_LIBS :=
CCL_SRC := src/comm/ccl_none.c
endif

# What this build chose, said once by a make run from the shell (not by those it starts).
ifeq ($(MAKELEVEL)$(filter clean,$(MAKECMDGOALS)),0)
CUDA_VERSION := $(if $(filter 1,$(CUDA)),$(shell $(NVCC) --version 2>/dev/null | \
                sed -n 's/.*release \([0-9.]*\),.*/\1/p'))
NCCL_VERSION := $(if $(filter 1,$(NCCL)),$(shell sed -n \
                's/^\#define NCCL_\(MAJOR\|MINOR\|PATCH\) *\([0-9]*\).*/\2/p' $(NCCL_HEADER) | \
                paste -sd.))
$(info blob: $(if $(filter 1,$(CUDA)),CUDA $(CUDA_VERSION) ($(CUDA_HOME)),no CUDA); \
  $(if $(filter 1,$(NCCL)),NCCL $(NCCL_VERSION) ($(NCCL_LIBFILE)),no NCCL); BLAS $(BLAS); \
  into $(BUILD)$(if $(filter 1,$(WERROR)),; warnings are errors))
endif

LIB_C_SRC := $(filter-out src/core/backend_cuda.c src/core/backend_none.c,$(wildcard src/core/*.c)) \
             $(BACKEND_SRC) $(wildcard src/alloc/*.c) $(wildcard src/syncedmem/*.c) \
             $(wildcard src/blob/*.c) $(wildcard src/math/*.c) $(wildcard src/interop/*.c) \
             $(KERNEL_C_SRC) $(filter-out src/comm/ccl_%.c,$(wildcard src/comm/*.c)) $(CCL_SRC)
LIB_OBJ := $(LIB_C_SRC:%.c=$(BUILD)/%.o) $(BACKEND_CU_SRC:%.cu=$(BUILD)/%.o) \
           $(KERNEL_SRC:%.cu=$(BUILD)/%.o)
LIB_LIBS := $(NCCL_LIBS) $(CUDA_LIBS) $(LDLIBS_BASE)

SHARED := $(BUILD)/libblob.so.$(VERSION)
STATIC := $(BUILD)/libblob.a

TEST_SRC := $(wildcard test/*.c)
# ... and the calls of the NULL-argument test, generated from the public headers.
NULL_ARGS_C := $(BUILD)/test/null_args.c
TEST_OBJ := $(TEST_SRC:%.c=$(BUILD)/%.o) $(NULL_ARGS_C:.c=.o)
TEST_BIN := $(BUILD)/test/blob_tests
CHECK_CFLAGS = $(shell pkg-config --cflags check 2>/dev/null)
CHECK_LIBS = $(shell pkg-config --libs check 2>/dev/null || echo -lcheck -lsubunit -lrt -lm)

.PHONY: all lib check test deps install uninstall clean bench demo install-check examples examples-check \
        dlpack-header python-check

all: lib launcher

lib: $(SHARED) $(STATIC)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

# Say what to install when DLPack's header is missing, before the compiler fails on it.
$(BUILD)/src/interop/%.o: | dlpack-header
dlpack-header:
	$(Q)printf '#include <dlpack/dlpack.h>\n' | $(CC) $(DLPACK_CFLAGS) -E -x c - >/dev/null 2>&1 || \
	    { echo "libblob needs DLPack's header <dlpack/dlpack.h>: make deps (Debian's" \
	        "libdlpack-dev), or point DLPACK_CFLAGS at it (DLPACK_CFLAGS=-I/its/include)" >&2; \
	      exit 1; }
# The toolkit's headers only for the C units that include them (the CUDA backend, the
# NCCL table), NCCL's only for those that include nccl.h.
$(BUILD)/src/core/backend_cuda.o: ALL_CFLAGS += $(CUDA_CFLAGS)
$(BUILD)/src/comm/ccl_nccl.o: ALL_CFLAGS += $(CUDA_CFLAGS) $(NCCL_CFLAGS)

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

$(NULL_ARGS_C): test/null_args.py $(wildcard include/blob/*.h)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  GEN     $@")
	$(Q)python3 test/null_args.py "$(CC)" > $@.tmp && mv $@.tmp $@

$(NULL_ARGS_C:.c=.o): $(NULL_ARGS_C)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(ALL_CFLAGS) -Itest -Wno-missing-prototypes -MMD -MP -c $< -o $@

# Tests link the static archive: they reach the internal backend table.
$(TEST_BIN): $(TEST_OBJ) $(STATIC)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(EXTRA_LDFLAGS) -o $@ $(TEST_OBJ) $(STATIC) $(CHECK_LIBS) $(LIB_LIBS)

# The launcher of ranks (docs/distributed.md), installed as blob-launch.
LAUNCH_BIN := $(BUILD)/tools/blob-launch
.PHONY: launcher
launcher: $(LAUNCH_BIN)

LAUNCH_SRC := tools/launch.c tools/launch_options.c src/core/number.c src/core/clock.c
$(LAUNCH_BIN): $(LAUNCH_SRC) tools/launch_options.h src/core/number.h src/core/clock.h \
               src/core/file_kind.h src/comm/record.h
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $@")
	$(Q)$(CC) -std=c11 -D_GNU_SOURCE $(WARN) $(CFLAGS) $(EXTRA_CFLAGS) $(EXTRA_LDFLAGS) -o $@ \
	    $(LAUNCH_SRC) -lm

# The launcher's tests, and the multi-process communicator tests on two GPUs (skipped
# with a count on fewer): test/comm/run.sh with its probe.
COMM_PROBE := $(BUILD)/test/comm_probe
.PHONY: check-comm
check-comm: $(LAUNCH_BIN) $(COMM_PROBE)
	$(Q)sh test/comm/run.sh $(BUILD)

$(COMM_PROBE): test/comm/comm_probe.c $(STATIC)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) -std=c11 -D_GNU_SOURCE $(WARN) -Iinclude $(CFLAGS) $(EXTRA_CFLAGS) $(EXTRA_LDFLAGS) \
	    -o $@ $< $(STATIC) $(LIB_LIBS)

# Benchmarks (bench/README.md); the GPU rows only in CUDA builds.
BENCH_SRC := bench/main.c bench/timing.c bench/report.c bench/api.c bench/dlpack.c \
             $(if $(filter 1,$(CUDA)),bench/gpu.c bench/conv.c bench/fused.c,bench/gpu_none.c)
BENCH_OBJ := $(BENCH_SRC:%.c=$(BUILD)/%.o)
$(BUILD)/bench/gpu.o $(BUILD)/bench/conv.o $(BUILD)/bench/fused.o: ALL_CFLAGS += $(CUDA_CFLAGS)
BENCH_BIN := $(BUILD)/bench/blob_bench

$(BENCH_BIN): $(BENCH_OBJ) $(STATIC)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(EXTRA_LDFLAGS) -o $@ $(BENCH_OBJ) $(STATIC) $(LIB_LIBS)

# All-reduce bus bandwidth through blob_comm beside raw NCCL and torch.distributed, on
# all local GPUs (two at least; NCCL builds). Arguments in BENCH_COMM_ARGS.
BENCH_COMM_BIN := $(BUILD)/bench/blob_bench_comm
.PHONY: bench-comm
ifeq ($(NCCL),1)
bench-comm: $(BENCH_COMM_BIN) $(LAUNCH_BIN)
	$(Q)$(BENCH_COMM_BIN) --launcher $(LAUNCH_BIN) $(BENCH_COMM_ARGS)
else
bench-comm:
	@echo "bench-comm: skipped: this build has no NCCL"
endif

$(BUILD)/bench/comm.o: ALL_CFLAGS += $(CUDA_CFLAGS) $(NCCL_CFLAGS)
$(BENCH_COMM_BIN): $(BUILD)/bench/comm.o $(BUILD)/bench/timing.o $(BUILD)/bench/report.o $(STATIC)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(EXTRA_LDFLAGS) -o $@ $^ $(LIB_LIBS)

# Data-parallel training speedup on all local GPUs (two at least; skipped otherwise):
# the examples' nets with a thread and with a process per GPU, beside PyTorch DDP
# (bench/dp_step.c, bench/ddp_torch.py). Arguments in BENCH_DP_ARGS.
.PHONY: bench-dp
DP_STEP := $(BUILD)/bench/dp_step
bench-dp: $(DP_STEP) $(LAUNCH_BIN)
	$(Q)$(DP_STEP) --launcher $(CURDIR)/$(LAUNCH_BIN) $(BENCH_DP_ARGS)

# make bench: blob_bench, the training step (net_step: a line per row on stderr as it
# goes, the tables at the end) and bench/dlpack.py. On a GPU net_step runs mlp and lenet
# at batch 64 and 256, mlp4096 at 512 in each precision (fp32, tf32, bf16, bf16-mixed,
# fp16-mixed) and mlp1024 at 512 in fp32 and the mixed ones (without torch.compile); on
# the host (no GPU), where every mode computes float32, each configuration once, with
# fewer steps: mlp at 64 and 256 and lenet at 64 (under a minute on a 2-core CPU, 2 the
# first time torch.compile runs), and with BENCH_FULL=1 lenet at 256 and mlp4096 at 512
# too (about 5 in all).
NET_STEP := $(BUILD)/bench/net_step
bench: $(BENCH_BIN) $(NET_STEP)
	$(Q)$(BENCH_BIN) $(BENCH_ARGS)
	$(Q)$(NET_STEP) --if gpu --net mlp --net lenet --batch 64 --batch 256 --tune 1
	$(Q)$(NET_STEP) --if gpu --net mlp4096 --batch 512 --precision fp32 --precision tf32 \
	    --precision bf16 --precision bf16-mixed --precision fp16-mixed --steps 50 --tune 1
	$(Q)$(NET_STEP) --if gpu --net mlp1024 --batch 512 --precision fp32 --precision bf16-mixed \
	    --precision fp16-mixed --steps 50 --tune 1 --compile 0
	$(Q)$(NET_STEP) --if cpu --net mlp --batch 64 --batch 256 --steps 50
	$(Q)$(NET_STEP) --if cpu --net lenet --batch 64 $(if $(BENCH_FULL),--batch 256) --steps 20
	$(if $(BENCH_FULL),$(Q)$(NET_STEP) --if cpu --net mlp4096 --batch 512 --steps 10 --repeats 3)
	$(Q)BLOB_LIBRARY=$(CURDIR)/$(SHARED) $(PYTHON) bench/dlpack.py

# make bench-trace: a kernel trace (CUPTI, bench/ktrace.c) of net_step's last replayed
# step, node by node, for where a graphed step's time goes; BENCH_TRACE_ARGS are
# net_step's (default: mlp4096 at 512 in bf16-mixed, tuned). CUDA builds only.
.PHONY: bench-trace
KTRACE := $(BUILD)/bench/ktrace.so
BENCH_TRACE_ARGS ?= --net mlp4096 --batch 512 --precision bf16-mixed --steps 30 --repeats 2 \
    --tune 1 --compile 0
$(KTRACE): bench/ktrace.c
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -O2 -shared -fPIC $(CUDA_CFLAGS) -o $@ $< -L$(CUDA_LIBDIR) \
	    -Wl,-rpath,$(CUDA_LIBDIR) -lcupti
ifeq ($(CUDA),1)
bench-trace: $(KTRACE) $(NET_STEP)
	$(Q)CUDA_INJECTION64_PATH=$(CURDIR)/$(KTRACE) BLOB_BENCH_PYTHON=false \
	    $(NET_STEP) --if gpu $(BENCH_TRACE_ARGS)
else
bench-trace:
	@echo "bench-trace: a CUDA build only (CUPTI)"
endif

# The packages of `check` (all of them); `demo` asks for its own, fewer.
deps:
	$(Q)BLAS=$(BLAS) PYTHON=$(PYTHON) sh tools/deps.sh check

test: $(TEST_BIN)
	$(Q)$(TEST_BIN)

# The README's test command: bring the dependencies, build, run the suite, then
# install into a temporary prefix and build a consumer with pkg-config.
check: deps
	$(Q)$(MAKE) --no-print-directory test
	$(Q)$(MAKE) --no-print-directory check-comm
	$(Q)$(MAKE) --no-print-directory install-check
	$(Q)$(MAKE) --no-print-directory examples-check
	$(Q)$(MAKE) --no-print-directory python-check

install-check: lib
	$(Q)sh tools/install-check.sh "$(MAKE)" "$(CUDA)"

# blob.pc names a directory under PREFIX relative to ${prefix}, so that
# pkg-config --define-prefix finds an install moved elsewhere.
pc_dir = $(if $(filter $(PREFIX),$(1)),$${prefix},$(if $(filter $(PREFIX)/%,$(1)),$${prefix}/$(patsubst $(PREFIX)/%,%,$(1)),$(1)))

# The CMake package (cmake/): the same directories relative to the prefix, which its
# config file finds from its own place; the static target's dependencies are libblob's
# own link line, a CMake list.
CMAKEDIR := $(LIBDIR)/cmake/blob
cmake_dir = $(subst $${prefix},$${_blob_prefix},$(call pc_dir,$(1)))
empty :=
space := $(empty) $(empty)
cmake_list = $(subst $(space),;,$(strip $(1)))

install: lib launcher
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR)/blob $(DESTDIR)$(PKGCONFIGDIR)
	install -d $(DESTDIR)$(CMAKEDIR)
	install -d $(DESTDIR)$(BINDIR)
	install -m 755 $(LAUNCH_BIN) $(DESTDIR)$(BINDIR)/blob-launch
	install -p -m 644 include/blob/*.h $(DESTDIR)$(INCLUDEDIR)/blob/
	install -m 755 $(SHARED) $(DESTDIR)$(LIBDIR)/
	ln -sf libblob.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libblob.so.$(SOVERSION)
	ln -sf libblob.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libblob.so
	install -m 644 $(STATIC) $(DESTDIR)$(LIBDIR)/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(call pc_dir,$(LIBDIR))|' \
	    -e 's|@INCLUDEDIR@|$(call pc_dir,$(INCLUDEDIR))|' \
	    -e 's|@VERSION@|$(VERSION)|' -e 's|@BLAS_REQUIRES@|$(BLAS_PC)|' \
	    -e 's|@LIBS_PRIVATE@|$(NCCL_LIBS) $(CUDA_LIBS) $(if $(BLAS_PC),$(BLAS_RPATH),$(BLAS_LIBS)) -lpthread -lm|' \
	    -e 's|@DLPACK_CFLAGS@|$(DLPACK_CFLAGS)|' \
	    blob.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/blob.pc
	sed -e "s|@PREFIX_FROM_HERE@|$$(realpath -m --relative-to=$(CMAKEDIR) $(PREFIX))|" \
	    -e 's|@LIBDIR@|$(call cmake_dir,$(LIBDIR))|' -e 's|@INCLUDEDIR@|$(call cmake_dir,$(INCLUDEDIR))|' \
	    -e 's|@VERSION@|$(VERSION)|' -e 's|@SOVERSION@|$(SOVERSION)|' \
	    -e 's|@LINK_LIBS@|$(call cmake_list,$(LIB_LIBS))|' \
	    -e 's|@DLPACK_CFLAGS@|$(call cmake_list,$(DLPACK_CFLAGS))|' \
	    cmake/blobConfig.cmake.in > $(DESTDIR)$(CMAKEDIR)/blobConfig.cmake
	sed -e 's|@VERSION@|$(VERSION)|' cmake/blobConfigVersion.cmake.in \
	    > $(DESTDIR)$(CMAKEDIR)/blobConfigVersion.cmake

uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/libblob.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libblob.so.$(SOVERSION) \
	      $(DESTDIR)$(LIBDIR)/libblob.so $(DESTDIR)$(LIBDIR)/libblob.a \
	      $(DESTDIR)$(PKGCONFIGDIR)/blob.pc $(DESTDIR)$(BINDIR)/blob-launch
	rm -rf $(DESTDIR)$(INCLUDEDIR)/blob $(DESTDIR)$(CMAKEDIR)

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

# net_step and dp_step, the benchmarks on the examples' nets: bench/ links the layers
# and nets as examples/Makefile archives them (libnn.a), the whole archive since the nets
# register themselves at start-up; examples/ reads nothing of bench/.
NN_LIB := $(EXAMPLES_BIN)/libnn.a
$(NN_LIB): examples ;
$(BUILD)/bench/net_step.o $(BUILD)/bench/dp_step.o: ALL_CFLAGS += -Iexamples/layers -Iexamples/nets
$(NET_STEP): $(BUILD)/bench/net_step.o $(BUILD)/bench/timing.o $(BUILD)/bench/report.o
$(DP_STEP): $(BUILD)/bench/dp_step.o $(BUILD)/bench/timing.o $(BUILD)/bench/report.o
$(NET_STEP) $(DP_STEP): $(NN_LIB) $(STATIC)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(EXTRA_LDFLAGS) -o $@ $(filter %.o,$^) -Wl,--whole-archive $(NN_LIB) \
	    -Wl,--no-whole-archive $(STATIC) $(LIB_LIBS)

# The README's first command: train a net (NET, default the MLP) on Fashion-MNIST, on the
# GPU when there is one. Options go in DEMO_ARGS, e.g. make demo NET=lenet DEMO_ARGS="--graph".
NET ?= mlp
demo:
	$(Q)BLAS=$(BLAS) PYTHON=$(PYTHON) sh tools/deps.sh demo
	$(Q)$(MAKE) --no-print-directory examples
	$(Q)$(EXAMPLES_BIN)/train --net $(NET) --out $(BUILD)/demo-out/$(NET) $(DEMO_ARGS)

# Layer gradient checks, CPU/GPU agreement, short runs on a 2000-image slice (one epoch
# of the MLP and two of LeNet, each of which must reach 60% test accuracy), data-parallel
# training (examples/check/dp_check.sh: the 1-rank path everywhere; 2 ranks against one
# GPU, and a rank killed, on two GPUs), mixed precision (examples/check/precision_check.sh:
# bf16-mixed and fp16-mixed reach fp32's threshold, a forced overflow skips steps), and the
# trainer's refusals of bad dataset paths and options (examples/check/data_check.sh).
examples-check: examples $(LAUNCH_BIN)
	$(Q)$(EXAMPLES_BIN)/gradcheck
	$(Q)$(EXAMPLES_BIN)/train --limit 2000 --epochs 1 --lr 0.05 --min-accuracy 0.6 \
	    --out $(BUILD)/check-out
	$(Q)$(EXAMPLES_BIN)/train --net lenet --limit 2000 --epochs 2 --min-accuracy 0.6 \
	    --out $(BUILD)/check-out-lenet
	$(Q)sh examples/check/precision_check.sh $(EXAMPLES_BIN) $(BUILD)/precision-check-out
	$(Q)sh examples/check/dp_check.sh $(EXAMPLES_BIN) $(LAUNCH_BIN) $(BUILD)/dp-check-out
	$(Q)sh examples/check/data_check.sh $(EXAMPLES_BIN)

# The Python module's tests against this build's library, then the DLPack example on
# the weights examples-check wrote. Tests needing NumPy, PyTorch, CuPy or a GPU are
# skipped, with a count, where those are missing.
python-check: lib
	$(Q)BLOB_LIBRARY=$(CURDIR)/$(SHARED) $(PYTHON) python/tests/run.py
	$(Q)BLOB_LIBRARY=$(CURDIR)/$(SHARED) $(PYTHON) python/examples/mlp_torch.py \
	    --weights $(BUILD)/check-out --check
# Fuzzing: each test/fuzz/fuzz_NAME.c is a libFuzzer target, its seeds are in
# test/fuzz/corpus/NAME/ and its dictionary, if any, is test/fuzz/NAME.dict; a new target
# is one such file and directory. `make fuzz` builds every target with clang (FUZZ_CC)
# under AddressSanitizer and UBSan against a CUDA=0 library built for it in build/fuzz,
# then runs each for FUZZ_SECONDS: first its seeds, then new inputs. Inputs that found
# new coverage go to build/fuzz/corpus/NAME, failing inputs to build/fuzz/NAME-crash-*
# (rerun one with build/fuzz/fuzz_NAME FILE). FUZZ_ARGS adds libFuzzer options. A target
# that needs sources or libraries beyond libblob names them here:
fuzz_idx_SRC := examples/data/fmnist.c
fuzz_idx_LIBS := -lz
fuzz_launch_options_SRC := tools/launch_options.c
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 60
FUZZ_BUILD := build/fuzz
FUZZ_SAN := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_NAMES := $(patsubst test/fuzz/fuzz_%.c,%,$(wildcard test/fuzz/fuzz_*.c))
FUZZ_BINS := $(FUZZ_NAMES:%=$(FUZZ_BUILD)/fuzz_%)
# One malloc above this fails the input: no reader may trust a size it has not read.
FUZZ_MALLOC_LIMIT_MB ?= 128

.PHONY: fuzz fuzz-build
fuzz-build:
	$(Q)sh tools/deps.sh fuzz
	$(Q)$(MAKE) --no-print-directory CUDA=0 CC=$(FUZZ_CC) BUILD=$(FUZZ_BUILD) \
	    EXTRA_CFLAGS="$(FUZZ_SAN) -fsanitize=fuzzer-no-link" EXTRA_LDFLAGS= $(FUZZ_BINS)

$(FUZZ_BUILD)/fuzz_%: test/fuzz/fuzz_%.c test/fuzz/fuzz.h $(FUZZ_BUILD)/libblob.a
	@$(if $(Q),echo "  FUZZ    $@")
	$(Q)$(FUZZ_CC) -std=c11 -D_GNU_SOURCE -g -O1 $(WARN) -Iinclude $(FUZZ_SAN) -fsanitize=fuzzer \
	    -o $@ $< $(fuzz_$*_SRC) $(FUZZ_BUILD)/libblob.a $(fuzz_$*_LIBS) $(LDLIBS_BASE)

fuzz: fuzz-build
	$(Q)for t in $(FUZZ_NAMES); do \
	    echo "== fuzz_$$t: $(FUZZ_SECONDS) s"; \
	    mkdir -p $(FUZZ_BUILD)/corpus/$$t && \
	    $(FUZZ_BUILD)/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -timeout=10 \
	        -malloc_limit_mb=$(FUZZ_MALLOC_LIMIT_MB) -print_final_stats=1 \
	        -artifact_prefix=$(FUZZ_BUILD)/$$t- \
	        $$(test -f test/fuzz/$$t.dict && echo -dict=test/fuzz/$$t.dict) $(FUZZ_ARGS) \
	        $(FUZZ_BUILD)/corpus/$$t test/fuzz/corpus/$$t || exit 1; \
	done

# The sources' layout (.clang-format): format rewrites them, format-check (CI) fails
# naming the files that differ. tools/deps.sh format brings clang-format.
FORMAT_SRC = $(shell git ls-files '*.c' '*.h' '*.cu' '*.cuh' 2>/dev/null)
.PHONY: format format-check
format:
	$(Q)sh tools/deps.sh format
	$(Q)clang-format -i $(FORMAT_SRC)

format-check:
	$(Q)sh tools/deps.sh format
	$(Q)clang-format --dry-run --Werror $(FORMAT_SRC) && \
	    echo "format-check: $(words $(FORMAT_SRC)) files as .clang-format lays them out"

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(BENCH_OBJ:.o=.d) $(BUILD)/bench/comm.d
