/* The GPU rows in a build without CUDA: there are none. */
#include "bench.h"

bool bench_gpu_open(bool with_torch)
{
    (void)with_torch;
    report_meta("device", "none: CPU-only build, no GPU found");
    return false;
}

void bench_gpu_alloc(void) {}
void bench_gpu_pinned(void) {}
void bench_gpu_sync(void) {}
void bench_gpu_update(void) {}
void bench_gpu_close(void) {}
void bench_fused_torch_args(char *buf, size_t size) { (void)buf, (void)size; }
void bench_gpu_optim(void) {}
void bench_gpu_fused_gemm(void) {}
void bench_gpu_gemm16(void) {}
void bench_gpu_conv(void) {}
