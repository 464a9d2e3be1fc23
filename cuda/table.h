// Function-pointer tables for libcuda, libnvrtc and libcublasLt, filled with
// dlopen/dlsym so that building turnstile needs no CUDA headers or libraries and a
// missing library or symbol is an error value, never a crash at load time.
//
// The types below mirror the ABI of the CUDA headers (cuda.h, nvrtc.h, cublasLt.h):
// handles are opaque pointers, CUdeviceptr is 64 bits, status codes are ints.
#ifndef TURNSTILE_CUDA_TABLE_H
#define TURNSTILE_CUDA_TABLE_H

#include <stddef.h>
#include <stdint.h>

typedef int tsc_result;          // CUresult, nvrtcResult, cublasStatus_t
typedef int tsc_device;          // CUdevice
typedef uint64_t tsc_deviceptr;  // CUdeviceptr
typedef void *tsc_handle;        // CUcontext, CUstream, CUmodule, ... (opaque)

// tsc_cuda: the libcuda driver API entries turnstile uses. Versioned names
// (cuMemAlloc_v2 ...) are the ones cuda.h maps the plain names to.
typedef struct {
	tsc_result (*cuGetErrorName)(tsc_result, const char **);
	tsc_result (*cuInit)(unsigned);
	tsc_result (*cuDriverGetVersion)(int *);
	tsc_result (*cuDeviceGetCount)(int *);
	tsc_result (*cuDeviceGet)(tsc_device *, int);
	tsc_result (*cuDeviceGetName)(char *, int, tsc_device);
	tsc_result (*cuDeviceGetAttribute)(int *, int, tsc_device);
	tsc_result (*cuDeviceTotalMem)(size_t *, tsc_device);
	tsc_result (*cuDevicePrimaryCtxRetain)(tsc_handle *, tsc_device);
	tsc_result (*cuDevicePrimaryCtxRelease)(tsc_device);
	tsc_result (*cuCtxSetCurrent)(tsc_handle);
	tsc_result (*cuCtxSynchronize)(void);
	tsc_result (*cuMemGetInfo)(size_t *, size_t *);
	tsc_result (*cuMemAlloc)(tsc_deviceptr *, size_t);
	tsc_result (*cuMemFree)(tsc_deviceptr);
	tsc_result (*cuMemHostAlloc)(void **, size_t, unsigned);
	tsc_result (*cuMemFreeHost)(void *);
	tsc_result (*cuMemsetD8Async)(tsc_deviceptr, unsigned char, size_t, tsc_handle);
	tsc_result (*cuMemsetD32Async)(tsc_deviceptr, unsigned, size_t, tsc_handle);
	tsc_result (*cuMemcpyHtoD)(tsc_deviceptr, const void *, size_t);
	tsc_result (*cuMemcpyDtoH)(void *, tsc_deviceptr, size_t);
	tsc_result (*cuMemcpyHtoDAsync)(tsc_deviceptr, const void *, size_t, tsc_handle);
	tsc_result (*cuMemcpyDtoHAsync)(void *, tsc_deviceptr, size_t, tsc_handle);
	tsc_result (*cuMemcpyDtoDAsync)(tsc_deviceptr, tsc_deviceptr, size_t, tsc_handle);
	tsc_result (*cuStreamCreate)(tsc_handle *, unsigned);
	tsc_result (*cuStreamDestroy)(tsc_handle);
	tsc_result (*cuStreamSynchronize)(tsc_handle);
	tsc_result (*cuEventCreate)(tsc_handle *, unsigned);
	tsc_result (*cuEventDestroy)(tsc_handle);
	tsc_result (*cuEventRecord)(tsc_handle, tsc_handle);
	tsc_result (*cuEventSynchronize)(tsc_handle);
	tsc_result (*cuEventElapsedTime)(float *, tsc_handle, tsc_handle);
	tsc_result (*cuModuleLoadData)(tsc_handle *, const void *);
	tsc_result (*cuModuleUnload)(tsc_handle);
	tsc_result (*cuModuleGetFunction)(tsc_handle *, tsc_handle, const char *);
	tsc_result (*cuFuncSetAttribute)(tsc_handle, int, int);
	tsc_result (*cuLaunchKernel)(tsc_handle, unsigned, unsigned, unsigned, unsigned,
				     unsigned, unsigned, unsigned, tsc_handle, void **, void **);
	tsc_result (*cuStreamBeginCapture)(tsc_handle, int);
	tsc_result (*cuStreamEndCapture)(tsc_handle, tsc_handle *);
	tsc_result (*cuGraphInstantiateWithFlags)(tsc_handle *, tsc_handle, unsigned long long);
	tsc_result (*cuGraphLaunch)(tsc_handle, tsc_handle);
	tsc_result (*cuGraphExecDestroy)(tsc_handle);
	tsc_result (*cuGraphDestroy)(tsc_handle);
} tsc_cuda;

// tsc_nvrtc: the NVRTC entries turnstile uses (nvrtcGetCUBIN needs NVRTC >= 11.1).
typedef struct {
	const char *(*nvrtcGetErrorString)(tsc_result);
	tsc_result (*nvrtcVersion)(int *, int *);
	tsc_result (*nvrtcCreateProgram)(tsc_handle *, const char *, const char *, int,
					 const char *const *, const char *const *);
	tsc_result (*nvrtcDestroyProgram)(tsc_handle *);
	tsc_result (*nvrtcCompileProgram)(tsc_handle, int, const char *const *);
	tsc_result (*nvrtcGetProgramLogSize)(tsc_handle, size_t *);
	tsc_result (*nvrtcGetProgramLog)(tsc_handle, char *);
	tsc_result (*nvrtcGetCUBINSize)(tsc_handle, size_t *);
	tsc_result (*nvrtcGetCUBIN)(tsc_handle, char *);
} tsc_nvrtc;

// tsc_cublaslt: the cuBLASLt entries for one matmul with a heuristic algorithm.
typedef struct {
	size_t (*cublasLtGetVersion)(void);
	tsc_result (*cublasLtCreate)(tsc_handle *);
	tsc_result (*cublasLtDestroy)(tsc_handle);
	tsc_result (*cublasLtMatmulDescCreate)(tsc_handle *, int, int);
	tsc_result (*cublasLtMatmulDescDestroy)(tsc_handle);
	tsc_result (*cublasLtMatmulDescSetAttribute)(tsc_handle, int, const void *, size_t);
	tsc_result (*cublasLtMatrixLayoutCreate)(tsc_handle *, int, uint64_t, uint64_t, int64_t);
	tsc_result (*cublasLtMatrixLayoutDestroy)(tsc_handle);
	tsc_result (*cublasLtMatmulPreferenceCreate)(tsc_handle *);
	tsc_result (*cublasLtMatmulPreferenceDestroy)(tsc_handle);
	tsc_result (*cublasLtMatmulPreferenceSetAttribute)(tsc_handle, int, const void *, size_t);
	tsc_result (*cublasLtMatmulAlgoGetHeuristic)(tsc_handle, tsc_handle, tsc_handle, tsc_handle,
						     tsc_handle, tsc_handle, tsc_handle, int, void *,
						     int *);
	tsc_result (*cublasLtMatmul)(tsc_handle, tsc_handle, const void *, const void *, tsc_handle,
				     const void *, tsc_handle, const void *, const void *, tsc_handle,
				     void *, tsc_handle, const void *, void *, size_t, tsc_handle);
} tsc_cublaslt;


// tsc_load_* resolve every entry of a table from handle. They return 0 on success,
// or -1 with *missing set to the (static) name of the first symbol not found.
int tsc_load_cuda(void *handle, tsc_cuda *t, const char **missing);
int tsc_load_nvrtc(void *handle, tsc_nvrtc *t, const char **missing);
int tsc_load_cublaslt(void *handle, tsc_cublaslt *t, const char **missing);

// tsc_launch launches f with its arguments packed in one buffer (params, size
// bytes, laid out with each argument at its natural alignment), through
// CU_LAUNCH_PARAM_BUFFER_POINTER so that no array of pointers crosses from Go.
tsc_result tsc_launch(const tsc_cuda *t, tsc_handle f, unsigned gx, unsigned gy, unsigned gz,
		      unsigned bx, unsigned by, unsigned bz, unsigned shmem, tsc_handle stream,
		      void *params, size_t size);

// tsc_algo is a cublasLtMatmulAlgo_t: an opaque 64-byte value.
typedef struct {
	uint64_t data[8];
} tsc_algo;

// tsc_lt_heuristic asks cuBLASLt for its best algorithm for the matmul desc
// over layouts la, lb, lc (C and D alike) within ws_size bytes of workspace.
// It sets *found to 1 and *algo on success; when there is none it returns 0
// with *found 0: cuBLASLt says so either with zero results or with
// CUBLAS_STATUS_NOT_SUPPORTED, and both mean the same to the caller.
tsc_result tsc_lt_heuristic(const tsc_cublaslt *t, tsc_handle lt, tsc_handle desc, tsc_handle la,
			    tsc_handle lb, tsc_handle lc, size_t ws_size, tsc_algo *algo, int *found);

// tsc_matmul runs D = alpha*op(A)*op(B) + beta*C with D in place of C, with an
// algorithm from tsc_lt_heuristic for the same desc and layouts.
tsc_result tsc_matmul(const tsc_cublaslt *t, tsc_handle lt, tsc_handle desc, const float *alpha,
		      tsc_deviceptr a, tsc_handle la, tsc_deviceptr b, tsc_handle lb,
		      const float *beta, tsc_deviceptr c, tsc_handle lc, const tsc_algo *algo,
		      tsc_deviceptr workspace, size_t ws_size, tsc_handle stream);

#endif
