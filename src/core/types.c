/* The small functions of the shared vocabulary (blob/types.h). */
#include "blob/types.h"
#include "core.h"

size_t blob_dtype_size(blob_dtype dtype)
{
    switch (dtype) {
    case BLOB_FLOAT32: return 4;
    case BLOB_FLOAT64:
    case BLOB_INT64: return 8;
    case BLOB_BFLOAT16:
    case BLOB_FLOAT16: return 2;
    case BLOB_INT32: return 4;
    case BLOB_UINT8: return 1;
    case BLOB_DTYPE_NONE: break;
    }
    return 0;
}

const char *blob_dtype_name(blob_dtype dtype)
{
    switch (dtype) {
    case BLOB_FLOAT32: return "float32";
    case BLOB_FLOAT64: return "float64";
    case BLOB_BFLOAT16: return "bfloat16";
    case BLOB_FLOAT16: return "float16";
    case BLOB_INT32: return "int32";
    case BLOB_INT64: return "int64";
    case BLOB_UINT8: return "uint8";
    case BLOB_DTYPE_NONE: break;
    }
    return "invalid";
}

bool blob_dtype_is_float(blob_dtype dtype)
{
    return dtype == BLOB_FLOAT32 || dtype == BLOB_FLOAT64 || dtype == BLOB_BFLOAT16 ||
           dtype == BLOB_FLOAT16;
}

size_t blob_relu_mask_bytes(int64_t M, int64_t N)
{
    if (M < 0 || N < 0 || N > INT64_MAX - 127)
        return 0;
    int64_t row = BLOB_RELU_MASK_ROW_BITS(N) / 8;
    if (row && M > (int64_t)(SIZE_MAX / 2) / row)
        return 0;
    return (size_t)(M * row);
}

blob_optim blob_optim_default(blob_optim_kind kind, double lr)
{
    blob_optim o = {.kind = kind, .lr = lr};
    if (kind == BLOB_OPTIM_ADAM || kind == BLOB_OPTIM_ADAMW) {
        o.beta1 = 0.9;
        o.beta2 = 0.999;
        o.eps = 1e-8;
        o.weight_decay = kind == BLOB_OPTIM_ADAMW ? 0.01 : 0;
    }
    return o;
}

int blob_optim_history_count(const blob_optim *opt)
{
    if (!opt) {
        BLOB_FAIL(BLOB_EINVAL, "opt is NULL");
        return -1;
    }
    switch (opt->kind) {
    case BLOB_OPTIM_SGD: return opt->momentum != 0;
    case BLOB_OPTIM_SGD_CAFFE: return 1;
    case BLOB_OPTIM_ADAM:
    case BLOB_OPTIM_ADAMW: return 2;
    }
    return -1;
}
