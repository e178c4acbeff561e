/* libFuzzer target: blob_from_dlpack on tensors derived from the input (device, dtype,
 * ndim, shape, strides, byte_offset, data pointer), over a real host buffer of exactly the
 * size the tensor describes, then a random sequence of shares, reshapes, exports and
 * frees. It checks that the importer reads nothing outside the shape and strides arrays
 * (heap-allocated to their exact length, so AddressSanitizer sees any overread), that a
 * failed import returns NULL and never calls the deleter, that an accepted one borrows
 * data + byte_offset for the tensor's element count, and that the deleter runs exactly
 * once, when the last holder lets go. Built against the CPU-only library, e.g.
 *   make CC=clang CUDA=0 BUILD_TAG=-fuzz \
 *        EXTRA_CFLAGS="-fsanitize=address,undefined,fuzzer-no-link" \
 *        build/cpu-fuzz/libblob.a
 *   clang -fsanitize=fuzzer,address,undefined -Iinclude test/fuzz/fuzz_dlpack.c \
 *        build/cpu-fuzz/libblob.a -lopenblas -lpthread -lm -o fuzz_dlpack
 *   ./fuzz_dlpack test/fuzz/corpus/dlpack
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blob/dlpack.h"

#define CHECK(cond)                                                                     \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "fuzz_dlpack: %s:%d: %s (%s)\n", __FILE__, __LINE__, #cond, \
                    blob_last_error());                                                 \
            abort();                                                                    \
        }                                                                               \
    } while (0)

/* The tensor dtypes the importer takes, indexed by blob_dtype. */
static const DLDataType DTYPES[] = {{kDLFloat, 32, 1}, {kDLFloat, 64, 1}, {kDLBfloat, 16, 1},
                                    {kDLFloat, 16, 1}, {kDLInt, 32, 1},   {kDLInt, 64, 1},
                                    {kDLUInt, 8, 1}};
#define N_DTYPES (sizeof DTYPES / sizeof *DTYPES)

/* The input, read front to back; zeros once it runs out. */
typedef struct {
    const uint8_t *p;
    size_t n;
} input;

static uint64_t take(input *in, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) {
        uint64_t b = 0;
        if (in->n) {
            b = *in->p++;
            in->n--;
        }
        v |= b << (8 * i);
    }
    return v;
}

static int deleted;

static void count_delete(DLManagedTensor *t)
{
    (void)t;
    deleted++;
}

#ifdef BLOB_DLPACK_VERSIONED
static void count_delete_versioned(DLManagedTensorVersioned *t)
{
    (void)t;
    deleted++;
}
#endif

/* Import t's DLTensor as it is, or (built with a DLPack 1.0 header, as the input's next
 * byte says) wrapped in a versioned tensor of either major version, read-only or not;
 * *refusable: whether the versioned wrapping alone must be refused. */
static blob_status import(blob **b, DLManagedTensor *t, int host_device, input *in, bool *refusable)
{
    *refusable = false;
#ifdef BLOB_DLPACK_VERSIONED
    unsigned v = (unsigned)take(in, 1);
    if (v & 1) {
        static DLManagedTensorVersioned vt;
        vt = (DLManagedTensorVersioned){
            .version = {DLPACK_MAJOR_VERSION + (v & 2 ? 1 : 0), DLPACK_MINOR_VERSION},
            .manager_ctx = NULL,
            .deleter = count_delete_versioned,
            .flags = v & 4 ? DLPACK_FLAG_BITMASK_READ_ONLY : 0,
            .dl_tensor = t->dl_tensor,
        };
        *refusable = (v & 2) || (v & 4);
        return blob_from_dlpack_versioned(b, &vt, host_device);
    }
#else
    (void)in;
#endif
    return blob_from_dlpack(b, t, host_device);
}

/* dims[i] * ... * elem + offset, or SIZE_MAX past 1 MiB (or on overflow). */
static size_t needed_bytes(int ndim, const int64_t *shape, size_t elem, uint64_t offset,
                           int64_t *count)
{
    const size_t cap = (size_t)1 << 20;
    uint64_t n = 1;
    bool big = false;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return SIZE_MAX;
        if (shape[i] == 0) {
            n = 0;
            big = false;
            break;
        }
        if (!big && __builtin_mul_overflow(n, (uint64_t)shape[i], &n))
            big = true;
        big |= n > cap;
    }
    *count = big ? -1 : (int64_t)n;
    if (big || offset > cap || n * elem + offset > cap)
        return SIZE_MAX;
    return (size_t)(n * elem + offset);
}

/* After an accepted import: shares, reshapes, exports and frees, driven by the input,
 * with every holder finally dropped. The deleter must not run before the last. Reads
 * only when the tensor's memory holds what it describes (`readable`). */
static void exercise(blob *b, input *in, bool readable)
{
    blob *blobs[4] = {b};
    DLManagedTensor *exports[4] = {0};
    int nb = 1;
    for (int step = 0; step < 16 && in->n; step++) {
        unsigned op = (unsigned)take(in, 1);
        unsigned k = (op >> 4) & 3;
        switch (op & 7) {
        case 0: /* a second blob sharing the data block */
            if (nb < 4 && blobs[0]) {
                blob *c;
                if (blob_create(&c, blob_get_dtype(blobs[0]), BLOB_HOST_ONLY,
                                blob_num_axes(blobs[0]), blob_shape(blobs[0])) == BLOB_OK) {
                    CHECK(blob_share_data(c, blobs[0]) == BLOB_OK);
                    blobs[nb++] = c;
                }
            }
            break;
        case 1: /* reshape: smaller keeps the block, larger replaces it */
            if (k < (unsigned)nb && blobs[k]) {
                int64_t dim = (int64_t)take(in, 1) % 64;
                (void)blob_reshape(blobs[k], 1, &dim);
            }
            break;
        case 2: /* an export holds the block */
            if (k < (unsigned)nb && blobs[k] && !exports[k])
                (void)blob_to_dlpack(blobs[k], BLOB_PART_DATA, BLOB_DLPACK_HOST,
                                     op & 8 ? BLOB_DLPACK_WRITABLE : 0, NULL, &exports[k]);
            break;
        case 3: /* drop an export */
            blob_dlpack_delete(exports[k]);
            exports[k] = NULL;
            break;
        case 4: /* free a blob */
            if (k < (unsigned)nb) {
                blob_free(blobs[k]);
                blobs[k] = NULL;
            }
            break;
        default: /* read everything a blob holds */
            if (readable && k < (unsigned)nb && blobs[k]) {
                const void *h;
                if (blob_cpu_data(blobs[k], &h) == BLOB_OK && h) {
                    volatile unsigned char sink = 0;
                    size_t bytes =
                        (size_t)blob_count(blobs[k]) * blob_dtype_size(blob_get_dtype(blobs[k]));
                    for (size_t i = 0; i < bytes; i++)
                        sink ^= ((const unsigned char *)h)[i];
                    (void)sink;
                }
            }
            break;
        }
    }
    CHECK(deleted == 0 || deleted == 1);
    for (int i = 0; i < 4; i++) {
        blob_free(i < nb ? blobs[i] : NULL);
        blob_dlpack_delete(exports[i]);
    }
    CHECK(deleted == 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    input in = {data, size};
    static const int device_types[] = {kDLCPU,         kDLCPU,    kDLCUDAHost, kDLCUDA,
                                       kDLCUDAManaged, kDLOpenCL, kDLROCM,     -1};
    unsigned sel = (unsigned)take(&in, 1);
    int device_type = device_types[sel & 7];
    if (device_type < 0)
        device_type = (int)(int8_t)take(&in, 1);
    int device_id = sel & 8 ? (int)(int8_t)take(&in, 1) : 0;

    unsigned dsel = (unsigned)take(&in, 1);
    DLDataType dtype = DTYPES[(dsel & 15) % N_DTYPES];
    if (dsel >> 4 == 15)
        dtype = (DLDataType){(uint8_t)take(&in, 1), (uint8_t)take(&in, 1), (uint16_t)take(&in, 2)};
    size_t elem = dtype.bits > 8 ? dtype.bits / 8u : 1;

    int ndim = (int)(int8_t)take(&in, 1);
    if (ndim < -2 || ndim > 36)
        ndim = ndim % 37;
    size_t len = ndim > 0 ? (size_t)ndim : 0;
    int64_t *shape = malloc(len * sizeof *shape + 1), *strides = malloc(len * sizeof *strides + 1);
    for (size_t i = 0; i < len; i++) {
        unsigned b = (unsigned)take(&in, 1);
        shape[i] = b < 0xF0 ? (int64_t)(b % 8) : (int64_t)take(&in, 8);
    }
    unsigned smode = (unsigned)take(&in, 1) % 4;
    int64_t stride = 1;
    for (size_t i = len; i-- > 0;) {
        if (smode == 3)
            strides[i] = (int64_t)take(&in, 8);
        else if (smode == 2 && shape[i] == 1)
            strides[i] = (int64_t)(int8_t)take(&in, 1);
        else
            strides[i] = stride;
        if (shape[i] > 0 && !__builtin_mul_overflow(stride, shape[i], &stride))
            continue;
        stride = 1;
    }

    unsigned omode = (unsigned)take(&in, 1);
    uint64_t offset = omode % 3 == 0   ? 0
                      : omode % 3 == 1 ? elem * (take(&in, 1) % 16)
                                       : take(&in, 8);
    int64_t count;
    size_t need = needed_bytes(ndim > 0 ? ndim : 0, shape, elem, offset, &count);
    bool readable = need != SIZE_MAX;
    unsigned char *buf = malloc(readable ? need + 1 : 64);
    unsigned dmode = (unsigned)take(&in, 1) % 8;
    void *ptr = dmode == 1 ? NULL : dmode == 2 ? buf + 1 : buf;
    if (dmode == 2)
        readable = false; /* misaligned: the import must refuse it */
    if (readable)
        memset(buf, 0x3c, need + 1);

    unsigned hsel = (unsigned)take(&in, 1) % 4;
    int host_device = hsel == 0   ? BLOB_HOST_ONLY
                      : hsel == 1 ? BLOB_DEVICE_DEFAULT
                      : hsel == 2 ? 0
                                  : (int)(int8_t)take(&in, 1);

    DLManagedTensor t = {
        .dl_tensor = {ptr,
                      {(DLDeviceType)device_type, device_id},
                      ndim,
                      dtype,
                      ndim > 0 ? shape : (take(&in, 1) & 1 ? NULL : shape),
                      smode ? strides : NULL,
                      offset},
        .manager_ctx = NULL,
        .deleter = count_delete,
    };
    deleted = 0;
    blob *b = (blob *)&t;
    bool refusable;
    blob_status st = import(&b, &t, host_device, &in, &refusable);
    if (st != BLOB_OK) {
        CHECK(b == NULL);
        CHECK(deleted == 0);
    } else {
        CHECK(!refusable);
        CHECK(deleted == 0);
        CHECK(device_type == kDLCPU || device_type == kDLCUDAHost); /* no GPU here */
        CHECK(dtype.lanes == 1 && dtype.bits == 8 * blob_dtype_size(blob_get_dtype(b)));
        CHECK(DTYPES[blob_get_dtype(b)].code == dtype.code);
        CHECK(ndim >= 0 && ndim <= BLOB_MAX_AXES);
        CHECK(blob_num_axes(b) == ndim);
        if (count >= 0)
            CHECK(blob_count(b) == count);
        if (readable && blob_count(b) > 0) {
            const void *h;
            CHECK(blob_cpu_data(b, &h) == BLOB_OK);
            CHECK(h == (char *)ptr + offset);
            void *w;
            CHECK(blob_mutable_cpu_data(b, &w) == BLOB_OK);
            memset(w, 0, (size_t)blob_count(b) * elem); /* inside the buffer, or ASan says */
        }
        exercise(b, &in, readable);
    }
    free(buf);
    free(shape);
    free(strides);
    return 0;
}
