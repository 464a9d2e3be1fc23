// Loading of the libnccl function table (see table.h).
#include "table.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

// One table slot: the exported symbol name and the byte offset of its slot.
typedef struct {
	const char *name;
	size_t off;
} sym;

#define ENTRY(field) {#field, offsetof(tsn_nccl, field)}

int tsn_load(void *handle, tsn_nccl *t, const char **missing) {
	static const sym syms[] = {
	    ENTRY(ncclGetVersion),
	    ENTRY(ncclGetErrorString),
	    ENTRY(ncclGetUniqueId),
	    ENTRY(ncclCommInitRank),
	    ENTRY(ncclCommDestroy),
	    ENTRY(ncclCommAbort),
	    ENTRY(ncclCommGetAsyncError),
	    ENTRY(ncclAllReduce),
	    ENTRY(ncclAllGather),
	    ENTRY(ncclReduceScatter),
	    ENTRY(ncclBroadcast),
	    ENTRY(ncclGroupStart),
	    ENTRY(ncclGroupEnd),
	};
	for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
		void *p = dlsym(handle, syms[i].name);
		if (p == NULL) {
			*missing = syms[i].name;
			return -1;
		}
		// POSIX guarantees a data pointer from dlsym converts to a function pointer.
		memcpy((char *)t + syms[i].off, &p, sizeof p);
	}
	return 0;
}
