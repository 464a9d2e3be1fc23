// Loading of the libcuda / libnvrtc / libcublasLt function tables (see table.h).
#include "table.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

// One table entry: the exported symbol name and the byte offset of its slot.
typedef struct {
	const char *name;
	size_t off;
} sym;

static int load(void *handle, void *table, const sym *syms, size_t n, const char **missing) {
	for (size_t i = 0; i < n; i++) {
		void *p = dlsym(handle, syms[i].name);
		if (p == NULL) {
			*missing = syms[i].name;
			return -1;
		}
		// POSIX guarantees a data pointer from dlsym converts to a function pointer.
		memcpy((char *)table + syms[i].off, &p, sizeof p);
	}
	return 0;
}

#define ENTRY(T, field, symbol) {symbol, offsetof(T, field)}
#define NSYMS(a) (sizeof(a) / sizeof((a)[0]))

int tsc_load_cuda(void *handle, tsc_cuda *t, const char **missing) {
	static const sym syms[] = {
	    ENTRY(tsc_cuda, cuInit, "cuInit"),
	    ENTRY(tsc_cuda, cuGetErrorName, "cuGetErrorName"),
	    ENTRY(tsc_cuda, cuDriverGetVersion, "cuDriverGetVersion"),
	    ENTRY(tsc_cuda, cuDeviceGetCount, "cuDeviceGetCount"),
	    ENTRY(tsc_cuda, cuDeviceGet, "cuDeviceGet"),
	    ENTRY(tsc_cuda, cuDeviceGetName, "cuDeviceGetName"),
	    ENTRY(tsc_cuda, cuDeviceGetAttribute, "cuDeviceGetAttribute"),
	    ENTRY(tsc_cuda, cuDeviceTotalMem, "cuDeviceTotalMem_v2"),
	    ENTRY(tsc_cuda, cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
	    ENTRY(tsc_cuda, cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"),
	    ENTRY(tsc_cuda, cuCtxSetCurrent, "cuCtxSetCurrent"),
	    ENTRY(tsc_cuda, cuCtxSynchronize, "cuCtxSynchronize"),
	    ENTRY(tsc_cuda, cuMemGetInfo, "cuMemGetInfo_v2"),
	    ENTRY(tsc_cuda, cuMemAlloc, "cuMemAlloc_v2"),
	    ENTRY(tsc_cuda, cuMemFree, "cuMemFree_v2"),
	    ENTRY(tsc_cuda, cuMemHostAlloc, "cuMemHostAlloc"),
	    ENTRY(tsc_cuda, cuMemFreeHost, "cuMemFreeHost"),
	    ENTRY(tsc_cuda, cuMemsetD8Async, "cuMemsetD8Async"),
	    ENTRY(tsc_cuda, cuMemsetD32Async, "cuMemsetD32Async"),
	    ENTRY(tsc_cuda, cuMemcpyHtoD, "cuMemcpyHtoD_v2"),
	    ENTRY(tsc_cuda, cuMemcpyDtoH, "cuMemcpyDtoH_v2"),
	    ENTRY(tsc_cuda, cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"),
	    ENTRY(tsc_cuda, cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"),
	    ENTRY(tsc_cuda, cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"),
	    ENTRY(tsc_cuda, cuStreamCreate, "cuStreamCreate"),
	    ENTRY(tsc_cuda, cuStreamDestroy, "cuStreamDestroy_v2"),
	    ENTRY(tsc_cuda, cuStreamSynchronize, "cuStreamSynchronize"),
	    ENTRY(tsc_cuda, cuEventCreate, "cuEventCreate"),
	    ENTRY(tsc_cuda, cuEventDestroy, "cuEventDestroy_v2"),
	    ENTRY(tsc_cuda, cuEventRecord, "cuEventRecord"),
	    ENTRY(tsc_cuda, cuEventSynchronize, "cuEventSynchronize"),
	    ENTRY(tsc_cuda, cuEventElapsedTime, "cuEventElapsedTime"),
	    ENTRY(tsc_cuda, cuModuleLoadData, "cuModuleLoadData"),
	    ENTRY(tsc_cuda, cuModuleUnload, "cuModuleUnload"),
	    ENTRY(tsc_cuda, cuModuleGetFunction, "cuModuleGetFunction"),
	    ENTRY(tsc_cuda, cuFuncSetAttribute, "cuFuncSetAttribute"),
	    ENTRY(tsc_cuda, cuLaunchKernel, "cuLaunchKernel"),
	    ENTRY(tsc_cuda, cuStreamBeginCapture, "cuStreamBeginCapture_v2"),
	    ENTRY(tsc_cuda, cuStreamEndCapture, "cuStreamEndCapture"),
	    ENTRY(tsc_cuda, cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags"),
	    ENTRY(tsc_cuda, cuGraphLaunch, "cuGraphLaunch"),
	    ENTRY(tsc_cuda, cuGraphExecDestroy, "cuGraphExecDestroy"),
	    ENTRY(tsc_cuda, cuGraphDestroy, "cuGraphDestroy"),
	};
	return load(handle, t, syms, NSYMS(syms), missing);
}

int tsc_load_nvrtc(void *handle, tsc_nvrtc *t, const char **missing) {
	static const sym syms[] = {
	    ENTRY(tsc_nvrtc, nvrtcVersion, "nvrtcVersion"),
	    ENTRY(tsc_nvrtc, nvrtcGetErrorString, "nvrtcGetErrorString"),
	    ENTRY(tsc_nvrtc, nvrtcCreateProgram, "nvrtcCreateProgram"),
	    ENTRY(tsc_nvrtc, nvrtcDestroyProgram, "nvrtcDestroyProgram"),
	    ENTRY(tsc_nvrtc, nvrtcCompileProgram, "nvrtcCompileProgram"),
	    ENTRY(tsc_nvrtc, nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize"),
	    ENTRY(tsc_nvrtc, nvrtcGetProgramLog, "nvrtcGetProgramLog"),
	    ENTRY(tsc_nvrtc, nvrtcGetCUBINSize, "nvrtcGetCUBINSize"),
	    ENTRY(tsc_nvrtc, nvrtcGetCUBIN, "nvrtcGetCUBIN"),
	};
	return load(handle, t, syms, NSYMS(syms), missing);
}

int tsc_load_cublaslt(void *handle, tsc_cublaslt *t, const char **missing) {
	static const sym syms[] = {
	    ENTRY(tsc_cublaslt, cublasLtGetVersion, "cublasLtGetVersion"),
	    ENTRY(tsc_cublaslt, cublasLtCreate, "cublasLtCreate"),
	    ENTRY(tsc_cublaslt, cublasLtDestroy, "cublasLtDestroy"),
	    ENTRY(tsc_cublaslt, cublasLtMatmulDescCreate, "cublasLtMatmulDescCreate"),
	    ENTRY(tsc_cublaslt, cublasLtMatmulDescDestroy, "cublasLtMatmulDescDestroy"),
	    ENTRY(tsc_cublaslt, cublasLtMatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute"),
	    ENTRY(tsc_cublaslt, cublasLtMatrixLayoutCreate, "cublasLtMatrixLayoutCreate"),
	    ENTRY(tsc_cublaslt, cublasLtMatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy"),
	    ENTRY(tsc_cublaslt, cublasLtMatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate"),
	    ENTRY(tsc_cublaslt, cublasLtMatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy"),
	    ENTRY(tsc_cublaslt, cublasLtMatmulPreferenceSetAttribute,
		  "cublasLtMatmulPreferenceSetAttribute"),
	    ENTRY(tsc_cublaslt, cublasLtMatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic"),
	    ENTRY(tsc_cublaslt, cublasLtMatmul, "cublasLtMatmul"),
	};
	return load(handle, t, syms, NSYMS(syms), missing);
}

// CU_LAUNCH_PARAM_* markers from cuda.h.
#define LAUNCH_PARAM_END ((void *)0x00)
#define LAUNCH_PARAM_BUFFER_POINTER ((void *)0x01)
#define LAUNCH_PARAM_BUFFER_SIZE ((void *)0x02)

tsc_result tsc_launch(const tsc_cuda *t, tsc_handle f, unsigned gx, unsigned gy, unsigned gz,
		      unsigned bx, unsigned by, unsigned bz, unsigned shmem, tsc_handle stream,
		      void *params, size_t size) {
	void *extra[] = {LAUNCH_PARAM_BUFFER_POINTER, params, LAUNCH_PARAM_BUFFER_SIZE, &size,
			 LAUNCH_PARAM_END};
	return t->cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, stream, NULL,
				 size > 0 ? extra : NULL);
}

// cublasLtMatmulHeuristicResult_t: algo (8 x uint64), workspaceSize, state,
// wavesCount, reserved[4]; the same layout in cuBLASLt 11 through 13.
typedef struct {
	tsc_algo algo;
	size_t workspace_size;
	int state;
	float waves;
	int reserved[4];
} heuristic;

// CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES (uint64_t).
#define PREF_MAX_WORKSPACE_BYTES 1
// CUBLAS_STATUS_NOT_SUPPORTED.
#define STATUS_NOT_SUPPORTED 15

tsc_result tsc_lt_heuristic(const tsc_cublaslt *t, tsc_handle lt, tsc_handle desc, tsc_handle la,
			    tsc_handle lb, tsc_handle lc, size_t ws_size, tsc_algo *algo, int *found) {
	*found = 0;
	tsc_handle pref = NULL;
	tsc_result r = t->cublasLtMatmulPreferenceCreate(&pref);
	if (r != 0)
		return r;
	uint64_t ws = ws_size;
	r = t->cublasLtMatmulPreferenceSetAttribute(pref, PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
	heuristic h;
	int n = 0;
	if (r == 0)
		r = t->cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 1, &h, &n);
	t->cublasLtMatmulPreferenceDestroy(pref);
	if (r == STATUS_NOT_SUPPORTED && n == 0)
		return 0; // no algorithm: *found stays 0
	if (r != 0 || n == 0)
		return r;
	*algo = h.algo;
	*found = 1;
	return 0;
}

tsc_result tsc_matmul(const tsc_cublaslt *t, tsc_handle lt, tsc_handle desc, const float *alpha,
		      tsc_deviceptr a, tsc_handle la, tsc_deviceptr b, tsc_handle lb,
		      const float *beta, tsc_deviceptr c, tsc_handle lc, const tsc_algo *algo,
		      tsc_deviceptr workspace, size_t ws_size, tsc_handle stream) {
	// Device addresses become pointers only here, on the C side.
	return t->cublasLtMatmul(lt, desc, alpha, (const void *)(uintptr_t)a, la,
				 (const void *)(uintptr_t)b, lb, beta, (const void *)(uintptr_t)c, lc,
				 (void *)(uintptr_t)c, lc, algo, (void *)(uintptr_t)workspace,
				 ws_size, stream);
}
