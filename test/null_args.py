#!/usr/bin/env python3
"""Generate the calls of the NULL-argument test (test/test_null_args.c runs them).

usage: python3 test/null_args.py CC > null_args.c      (make does this at build time)

Every public function is found by running the C preprocessor over all of
include/blob/*.h with -DBLOB_BUILDING, where BLOB_API becomes a visibility attribute:
functions declared by macros (the math families) come out expanded, and a new header or
function is picked up without any list to keep. For each pointer parameter of each
function one call is generated: NULL there, a valid value in every other parameter. The
call must not crash. Then, unless the parameter may be NULL (MAY_BE_NULL), a function
returning blob_status must return BLOB_EINVAL (BLOB_ENODEV for device functions on a
machine without a GPU), and a value-returning query its neutral value (NEUTRAL); either
must record a detail for blob_last_error.

To cover a new type or function, add one line to a table below:
  VALUES       a valid value for a parameter: (function regex, parameter regex, type)
               -> C expression; `fx` is the fixture of test/null_args.h (add a member
               there when no existing one fits). First match wins.
  MAY_BE_NULL  (function regex, parameter regex, type regex) of parameters that may be
               NULL (documented no-ops, optional outputs, streams: NULL is the default).
  NEUTRAL      (function regex, return type) -> C condition on `r`, the value returned
               for a NULL argument.
A parameter or return type that no line matches stops the build, naming the function.
"""
import os
import re
import subprocess
import sys

ANY = r".*"

VALUES = [
    # blobs and blocks: a 2x3 float32 blob; the second blob of copy/share is another
    (ANY, r"other|src", "blob *", "fx.b2"),
    (ANY, ANY, "blob *", "fx.b"),
    (ANY, r"other|src", "const blob *", "fx.b2"),
    (ANY, ANY, "const blob *", "fx.b"),
    (ANY, ANY, "blob **", "&fx.out_blob"),
    (ANY, ANY, "blob_syncedmem *", "fx.mem"),
    (ANY, ANY, "const blob_syncedmem *", "fx.mem"),
    (ANY, ANY, "blob_syncedmem **", "&fx.out_mem"),
    (ANY, ANY, "blob_graph *", "NULL"),  # none can be made without a GPU
    (ANY, ANY, "const blob_graph *", "NULL"),
    (ANY, ANY, "blob_graph **", "&fx.out_graph"),
    (ANY, ANY, "blob_event *", "NULL"),  # none can be made without a GPU
    (ANY, ANY, "blob_event **", "&fx.out_event"),
    (ANY, ANY, "blob_alloc_stats *", "&fx.out_stats"),
    (ANY, ANY, "blob_release_fn", "null_release"),
    (ANY, ANY, "blob_comm_options *", "&fx.comm_opts"),
    (ANY, ANY, "const blob_comm_options *", "&fx.comm_opts"),
    (ANY, ANY, "blob_comm *", "fx.comm"),
    (ANY, ANY, "const blob_comm *", "fx.comm"),
    (ANY, ANY, "blob_comm **", "&fx.out_comm"),
    (ANY, ANY, "blob_comm_list *", "fx.list"),
    (ANY, ANY, "const blob_comm_list *", "fx.list"),
    (r"blob_comm_list_bucket$", ANY, "int64_t *", "&fx.out_i64"),
    (ANY, ANY, "blob_comm_bucket_timing *", "fx.bucket_timing"),
    (r"blob_comm_list_timing", ANY, "int *", "&fx.out_int"),
    (r"blob_comm_list_timing", ANY, "double *", "&fx.out_double"),
    (ANY, ANY, "blob_comm_list **", "&fx.out_list"),
    (ANY, ANY, "blob *const *", "fx.blobs"),
    (ANY, ANY, "const int *", "fx.devices"),
    (ANY, ANY, "blob_comm_id *", "&fx.comm_id"),
    (ANY, ANY, "const blob_comm_id *", "&fx.comm_id"),
    (r"all_reduce_host", r"^values$", "double *", "fx.host"),
    (ANY, ANY, "DLManagedTensor *", "&fx.tensor"),
    (ANY, ANY, "DLManagedTensor **", "&fx.out_tensor"),
    (ANY, ANY, "const blob_conv_geometry *", "&fx.geom"),
    (ANY, ANY, "int32_t *", "fx.argmax"),
    (ANY, ANY, "const int32_t *", "fx.argmax"),
    (ANY, ANY, "const blob_optim *", "&fx.optim"),
    (ANY, ANY, "blob_optim_state *", "fx.optim_state"),
    (ANY, ANY, "const blob_optim_state *", "fx.optim_state"),
    (ANY, ANY, "blob_optim_state **", "&fx.out_optim_state"),
    (r"optim_step|find_nonfinite", r"^counts$", "const int64_t *", "fx.shape"),
    (ANY, ANY, "blob_grad_scaler *", "fx.grad_scaler"),
    (ANY, ANY, "const blob_grad_scaler *", "fx.grad_scaler"),
    (ANY, ANY, "blob_grad_scaler **", "&fx.out_grad_scaler"),
    (ANY, ANY, "void *const *", "fx.arrays"),
    (ANY, ANY, "const void *const *", "(const void *const *)fx.arrays"),
    (ANY, ANY, "blob_blas_info *", "&fx.out_blas"),
    (ANY, ANY, "bool *", "&fx.out_bool"),
    # arrays: device memory for device functions, host memory otherwise
    (r"_gpu_", r"^(?!stream$)", "void *", "fx.dev"),
    (r"_gpu_", ANY, "const void *", "fx.dev"),
    (r"blob_place_record_stream", r"^p$", "void *", "fx.place_block"),
    (ANY, r"stream", "void *", "NULL"),
    (r"_gpu_", ANY, "float *", "(float *)fx.dev"),
    (ANY, ANY, "float *", "(float *)fx.host"),
    (ANY, ANY, "const float *", "(const float *)fx.host"),
    (ANY, ANY, "uint16_t *", "(uint16_t *)fx.host"),
    (ANY, ANY, "const uint16_t *", "(const uint16_t *)fx.host"),
    (ANY, ANY, "void *", "fx.host"),
    (ANY, ANY, "const void *", "fx.host"),
    (ANY, ANY, "void **", "&fx.out_ptr"),
    (ANY, ANY, "const void **", "&fx.out_cptr"),
    (ANY, r"shape|indices", "const int64_t *", "fx.shape"),
    (ANY, ANY, "int64_t *", "&fx.out_i64"),
    (ANY, ANY, "int *", "&fx.out_int"),
    (ANY, ANY, "double *", "&fx.out_double"),
    (ANY, ANY, "char *", "fx.str"),
    (ANY, r"path", "const char *", "fx.path"),
    (ANY, r"^hex$", "const char *", "fx.str"),
    # scalars
    (r"_optim_step_mixed$", ANY, "blob_dtype", "BLOB_BFLOAT16"),
    (r"_softmax_loss_\w*mixed$", r"^label_dtype$", "blob_dtype", "BLOB_INT32"),
    (ANY, ANY, "blob_dtype", "BLOB_FLOAT32"),
    (ANY, ANY, "blob_trans", "BLOB_NO_TRANS"),
    (ANY, ANY, "blob_part", "BLOB_PART_DATA"),
    (ANY, ANY, "blob_place", "blob_place_host()"),
    (ANY, ANY, "blob_dlpack_side", "BLOB_DLPACK_HOST"),
    (ANY, ANY, "blob_comm_op", "BLOB_COMM_SUM"),
    (ANY, ANY, "blob_math_mode", "BLOB_MATH_DEFAULT"),
    (ANY, ANY, "blob_epilogue", "BLOB_EPILOGUE_BIAS_RELU"),
    (ANY, ANY, "blob_optim_kind", "BLOB_OPTIM_ADAM"),
    (ANY, ANY, "unsigned", "0"),
    (ANY, ANY, "blob_status", "BLOB_EINVAL"),
    (ANY, ANY, "bool", "false"),
    (ANY, ANY, "double", "1.0"),
    (ANY, r"^(num_axes|n|end)$", "int", "2"),
    (ANY, r"^device$", "int", "BLOB_DEVICE_DEFAULT"),
    (ANY, ANY, "int", "0"),
    (ANY, r"^size$", "size_t", "sizeof fx.str"),
    (ANY, ANY, "size_t", "64"),
    (ANY, ANY, "int64_t", "2"),
]

MAY_BE_NULL = [
    (r"_free$", ANY, ANY),                     # documented no-ops
    (r"^blob_syncedmem_retain$", ANY, ANY),
    (r"^blob_legacy_shape$", r"^(num|channels|height|width)$", ANY),  # optional outputs
    (ANY, r"stream", r"^void \*$"),            # NULL: the legacy default stream
    (r"_release$", r"^(release|ctx)$", ANY),   # NULL release: a plain borrow
    (r"^blob_dlpack_delete$", ANY, ANY),       # documented no-op
    (r"_gemm_epilogue$", r"^mask$", ANY),      # a ReLU's mask is optional
    (r"^blob_optim_step_mixed$", r"^(scaler|skipped)$", ANY),  # no loss scaling; no answer
    (r"_softmax_loss_mixed$", r"^dlogits$", ANY),  # forward only
]

NEUTRAL = [
    (ANY, "blob_dtype", "r == BLOB_DTYPE_NONE"),
    (r"^blob_optim_history_count$", "int", "r == -1"),
    (ANY, "blob *", "r == NULL"),
    (r"_device$", "int", "r == BLOB_HOST_ONLY"),
    (ANY, "int", "r == 0"),
    (ANY, "int64_t", "r == 0"),
    (ANY, "double", "r == 0"),
    (ANY, "size_t", "r == 0"),
    (ANY, "bool", "!r"),
    (ANY, "blob_head", "r == BLOB_HEAD_UNINITIALIZED"),
    (ANY, "const int64_t *", "r == NULL"),
    (ANY, "blob_syncedmem *", "r == NULL"),
]

MARK = '__attribute__((visibility("default")))'


def fail(msg):
    sys.exit("null_args.py: " + msg)


def norm(t):
    """A type as written in the tables: single spaces, '*' attached as 'T *' / 'T **'."""
    t = re.sub(r"\b_Bool\b", "bool", re.sub(r"\s+", " ", t)).strip()
    t = re.sub(r"\s*\*\s*", "*", t)
    return re.sub(r"(?<=[^*])\*", " *", t)


def split_params(func, text):
    text = text.strip()
    if text in ("", "void"):
        return []
    if "(" in text:
        fail("%s: declare function pointer parameters with a typedef: %s" % (func, text))
    out = []
    for p in text.split(","):
        m = re.match(r"^(.*?)(\w+)\s*(\[\s*\])?$", p.strip())
        if not m or not m.group(1).strip():
            fail("%s: cannot parse parameter '%s' (each needs a name)" % (func, p.strip()))
        t = m.group(1) + (" *" if m.group(3) else "")
        out.append((norm(t), m.group(2)))
    return out


def declarations(cc):
    inc = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "include")
    headers = sorted(h for h in os.listdir(os.path.join(inc, "blob")) if h.endswith(".h"))
    src = "".join('#include "blob/%s"\n' % h for h in headers)
    text = subprocess.run(cc.split() + ["-E", "-P", "-DBLOB_BUILDING", "-I", inc, "-x", "c", "-"],
                          input=src, capture_output=True, text=True, check=True).stdout
    funcs = []
    for chunk in text.split(MARK)[1:]:
        decl = chunk.split(";", 1)[0]
        m = re.match(r"^\s*(.*?)\b(blob_\w+)\s*\((.*)\)\s*$", decl, re.S)
        if not m:
            fail("cannot parse declaration '%s'" % " ".join(decl.split()))
        funcs.append((norm(m.group(1)), m.group(2), split_params(m.group(2), m.group(3))))
    if not funcs:
        fail("no BLOB_API function found")
    return funcs


def lookup(func, name, typ):
    for f, p, t, v in VALUES:
        if t == typ and re.search(f, func) and re.search(p, name):
            return v
    fail("%s: no valid value for parameter '%s' of type '%s': add a line to VALUES"
         % (func, name, typ))


def may_be_null(func, name, typ):
    return any(re.search(f, func) and re.search(p, name) and re.search(t, typ)
               for f, p, t in MAY_BE_NULL)


def neutral(func, ret):
    for f, t, cond in NEUTRAL:
        if t == ret and re.search(f, func):
            return cond
    fail("%s: no neutral value for return type '%s': add a line to NEUTRAL" % (func, ret))


def main():
    if len(sys.argv) != 2:
        fail("usage: python3 test/null_args.py CC")
    funcs = declarations(sys.argv[1])
    out = ["/* Generated by test/null_args.py from the headers of include/blob: do not edit. */",
           '#include "null_args.h"', ""]
    table = []
    for ret, func, params in funcs:
        values = [lookup(func, n, t) for t, n in params]  # every type must be known
        for i, (typ, name) in enumerate(params):
            if "*" not in typ:
                continue
            args = ", ".join("NULL" if j == i else v for j, v in enumerate(values))
            call = "%s(%s)" % (func, args)
            k = len(table)
            out.append("static void call_%d(void)\n{" % k)
            if ret == "void":
                out.append("    %s;" % call)
            elif ret == "blob_status":
                out.append("    null_check_status(%s);" % call)
            else:
                out.append("    %s r = %s;" % (ret, call))
                out.append("    null_check_value(%s);" % neutral(func, ret))
            out.append("}\n")
            table.append('    {"%s", "%s", %s, call_%d},'
                         % (func, name, "true" if may_be_null(func, name, typ) else "false", k))
    out.append("const null_call null_calls[] = {")
    out += table
    out.append("};")
    out.append("const int null_num_calls = %d;" % len(table))
    print("\n".join(out))


main()
