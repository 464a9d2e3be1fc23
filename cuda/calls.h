// Trampolines: cgo cannot call a C function pointer, so each table entry Go uses
// has a small static function that calls through the table.
#ifndef TURNSTILE_CUDA_CALLS_H
#define TURNSTILE_CUDA_CALLS_H

#include "table.h"

static inline tsc_result tsc_cu_error_name(const tsc_cuda *t, tsc_result r, const char **s) { return t->cuGetErrorName(r, s); }
static inline tsc_result tsc_cu_init(const tsc_cuda *t) { return t->cuInit(0); }
static inline tsc_result tsc_cu_driver_version(const tsc_cuda *t, int *v) { return t->cuDriverGetVersion(v); }
static inline tsc_result tsc_cu_device_count(const tsc_cuda *t, int *n) { return t->cuDeviceGetCount(n); }
static inline tsc_result tsc_cu_device_get(const tsc_cuda *t, tsc_device *d, int i) { return t->cuDeviceGet(d, i); }
static inline tsc_result tsc_cu_device_name(const tsc_cuda *t, char *s, int n, tsc_device d) { return t->cuDeviceGetName(s, n, d); }
static inline tsc_result tsc_cu_device_attr(const tsc_cuda *t, int *v, int a, tsc_device d) { return t->cuDeviceGetAttribute(v, a, d); }
static inline tsc_result tsc_cu_device_total_mem(const tsc_cuda *t, size_t *v, tsc_device d) { return t->cuDeviceTotalMem(v, d); }
static inline tsc_result tsc_cu_primary_retain(const tsc_cuda *t, tsc_handle *c, tsc_device d) { return t->cuDevicePrimaryCtxRetain(c, d); }
static inline tsc_result tsc_cu_primary_release(const tsc_cuda *t, tsc_device d) { return t->cuDevicePrimaryCtxRelease(d); }
static inline tsc_result tsc_cu_ctx_set_current(const tsc_cuda *t, tsc_handle c) { return t->cuCtxSetCurrent(c); }
static inline tsc_result tsc_cu_ctx_sync(const tsc_cuda *t) { return t->cuCtxSynchronize(); }
static inline tsc_result tsc_cu_mem_info(const tsc_cuda *t, size_t *f, size_t *tot) { return t->cuMemGetInfo(f, tot); }
static inline tsc_result tsc_cu_mem_alloc(const tsc_cuda *t, tsc_deviceptr *p, size_t n) { return t->cuMemAlloc(p, n); }
static inline tsc_result tsc_cu_mem_free(const tsc_cuda *t, tsc_deviceptr p) { return t->cuMemFree(p); }
static inline tsc_result tsc_cu_host_alloc(const tsc_cuda *t, void **p, size_t n, unsigned f) { return t->cuMemHostAlloc(p, n, f); }
static inline tsc_result tsc_cu_host_free(const tsc_cuda *t, void *p) { return t->cuMemFreeHost(p); }
static inline tsc_result tsc_cu_memset8(const tsc_cuda *t, tsc_deviceptr p, unsigned char v, size_t n, tsc_handle s) { return t->cuMemsetD8Async(p, v, n, s); }
static inline tsc_result tsc_cu_memset32(const tsc_cuda *t, tsc_deviceptr p, unsigned v, size_t n, tsc_handle s) { return t->cuMemsetD32Async(p, v, n, s); }
static inline tsc_result tsc_cu_htod(const tsc_cuda *t, tsc_deviceptr d, const void *h, size_t n) { return t->cuMemcpyHtoD(d, h, n); }
static inline tsc_result tsc_cu_dtoh(const tsc_cuda *t, void *h, tsc_deviceptr d, size_t n) { return t->cuMemcpyDtoH(h, d, n); }
static inline tsc_result tsc_cu_htod_async(const tsc_cuda *t, tsc_deviceptr d, const void *h, size_t n, tsc_handle s) { return t->cuMemcpyHtoDAsync(d, h, n, s); }
static inline tsc_result tsc_cu_dtoh_async(const tsc_cuda *t, void *h, tsc_deviceptr d, size_t n, tsc_handle s) { return t->cuMemcpyDtoHAsync(h, d, n, s); }
static inline tsc_result tsc_cu_dtod_async(const tsc_cuda *t, tsc_deviceptr d, tsc_deviceptr src, size_t n, tsc_handle s) { return t->cuMemcpyDtoDAsync(d, src, n, s); }
static inline tsc_result tsc_cu_stream_create(const tsc_cuda *t, tsc_handle *s, unsigned f) { return t->cuStreamCreate(s, f); }
static inline tsc_result tsc_cu_stream_destroy(const tsc_cuda *t, tsc_handle s) { return t->cuStreamDestroy(s); }
static inline tsc_result tsc_cu_stream_sync(const tsc_cuda *t, tsc_handle s) { return t->cuStreamSynchronize(s); }
static inline tsc_result tsc_cu_event_create(const tsc_cuda *t, tsc_handle *e, unsigned f) { return t->cuEventCreate(e, f); }
static inline tsc_result tsc_cu_event_destroy(const tsc_cuda *t, tsc_handle e) { return t->cuEventDestroy(e); }
static inline tsc_result tsc_cu_event_record(const tsc_cuda *t, tsc_handle e, tsc_handle s) { return t->cuEventRecord(e, s); }
static inline tsc_result tsc_cu_event_sync(const tsc_cuda *t, tsc_handle e) { return t->cuEventSynchronize(e); }
static inline tsc_result tsc_cu_event_elapsed(const tsc_cuda *t, float *ms, tsc_handle a, tsc_handle b) { return t->cuEventElapsedTime(ms, a, b); }
static inline tsc_result tsc_cu_module_load(const tsc_cuda *t, tsc_handle *m, const void *img) { return t->cuModuleLoadData(m, img); }
static inline tsc_result tsc_cu_module_unload(const tsc_cuda *t, tsc_handle m) { return t->cuModuleUnload(m); }
static inline tsc_result tsc_cu_module_function(const tsc_cuda *t, tsc_handle *f, tsc_handle m, const char *name) { return t->cuModuleGetFunction(f, m, name); }
static inline tsc_result tsc_cu_func_set_attr(const tsc_cuda *t, tsc_handle f, int a, int v) { return t->cuFuncSetAttribute(f, a, v); }
static inline tsc_result tsc_cu_begin_capture(const tsc_cuda *t, tsc_handle s, int mode) { return t->cuStreamBeginCapture(s, mode); }
static inline tsc_result tsc_cu_end_capture(const tsc_cuda *t, tsc_handle s, tsc_handle *g) { return t->cuStreamEndCapture(s, g); }
static inline tsc_result tsc_cu_graph_instantiate(const tsc_cuda *t, tsc_handle *e, tsc_handle g) { return t->cuGraphInstantiateWithFlags(e, g, 0); }
static inline tsc_result tsc_cu_graph_launch(const tsc_cuda *t, tsc_handle e, tsc_handle s) { return t->cuGraphLaunch(e, s); }
static inline tsc_result tsc_cu_graph_exec_destroy(const tsc_cuda *t, tsc_handle e) { return t->cuGraphExecDestroy(e); }
static inline tsc_result tsc_cu_graph_destroy(const tsc_cuda *t, tsc_handle g) { return t->cuGraphDestroy(g); }

static inline const char *tsc_nvrtc_error(const tsc_nvrtc *t, tsc_result r) { return t->nvrtcGetErrorString(r); }
static inline tsc_result tsc_nvrtc_version(const tsc_nvrtc *t, int *maj, int *min) { return t->nvrtcVersion(maj, min); }
static inline tsc_result tsc_nvrtc_create(const tsc_nvrtc *t, tsc_handle *p, const char *src, const char *name) { return t->nvrtcCreateProgram(p, src, name, 0, NULL, NULL); }
static inline tsc_result tsc_nvrtc_destroy(const tsc_nvrtc *t, tsc_handle *p) { return t->nvrtcDestroyProgram(p); }
static inline tsc_result tsc_nvrtc_compile(const tsc_nvrtc *t, tsc_handle p, int n, const char *const *opts) { return t->nvrtcCompileProgram(p, n, opts); }
static inline tsc_result tsc_nvrtc_log_size(const tsc_nvrtc *t, tsc_handle p, size_t *n) { return t->nvrtcGetProgramLogSize(p, n); }
static inline tsc_result tsc_nvrtc_log(const tsc_nvrtc *t, tsc_handle p, char *s) { return t->nvrtcGetProgramLog(p, s); }
static inline tsc_result tsc_nvrtc_cubin_size(const tsc_nvrtc *t, tsc_handle p, size_t *n) { return t->nvrtcGetCUBINSize(p, n); }
static inline tsc_result tsc_nvrtc_cubin(const tsc_nvrtc *t, tsc_handle p, char *s) { return t->nvrtcGetCUBIN(p, s); }

static inline size_t tsc_lt_version(const tsc_cublaslt *t) { return t->cublasLtGetVersion(); }
static inline tsc_result tsc_lt_create(const tsc_cublaslt *t, tsc_handle *h) { return t->cublasLtCreate(h); }
static inline tsc_result tsc_lt_destroy(const tsc_cublaslt *t, tsc_handle h) { return t->cublasLtDestroy(h); }
static inline tsc_result tsc_lt_desc_create(const tsc_cublaslt *t, tsc_handle *d, int compute, int scale) { return t->cublasLtMatmulDescCreate(d, compute, scale); }
static inline tsc_result tsc_lt_desc_destroy(const tsc_cublaslt *t, tsc_handle d) { return t->cublasLtMatmulDescDestroy(d); }
static inline tsc_result tsc_lt_desc_set_i32(const tsc_cublaslt *t, tsc_handle d, int attr, int32_t v) { return t->cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof v); }
static inline tsc_result tsc_lt_layout_create(const tsc_cublaslt *t, tsc_handle *l, int type, uint64_t rows, uint64_t cols, int64_t ld) { return t->cublasLtMatrixLayoutCreate(l, type, rows, cols, ld); }
static inline tsc_result tsc_lt_layout_destroy(const tsc_cublaslt *t, tsc_handle l) { return t->cublasLtMatrixLayoutDestroy(l); }

#endif
