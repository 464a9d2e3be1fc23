// Loading of the libmpi function table (see table.h).
#include "table.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

// One table slot: the exported symbol name and the byte offset of its slot.
typedef struct {
	const char *name;
	size_t off;
} sym;

#define ENTRY(field) {#field, offsetof(tsm_mpi, field)}
#define HANDLE(field, symbol) {symbol, offsetof(tsm_mpi, field)}

int tsm_load(void *handle, tsm_mpi *t, const char **missing) {
	static const sym syms[] = {
	    ENTRY(MPI_Init_thread),
	    ENTRY(MPI_Initialized),
	    ENTRY(MPI_Finalized),
	    ENTRY(MPI_Finalize),
	    ENTRY(MPI_Abort),
	    ENTRY(MPI_Comm_rank),
	    ENTRY(MPI_Comm_size),
	    ENTRY(MPI_Comm_set_errhandler),
	    ENTRY(MPI_Comm_dup),
	    ENTRY(MPI_Comm_free),
	    ENTRY(MPI_Error_string),
	    ENTRY(MPI_Barrier),
	    ENTRY(MPI_Bcast),
	    ENTRY(MPI_Allgather),
	    ENTRY(MPI_Allgatherv),
	    ENTRY(MPI_Gatherv),
	    ENTRY(MPI_Allreduce),
	    ENTRY(MPI_Reduce_scatter_block),
	    ENTRY(MPI_Reduce_scatter),
	    ENTRY(MPI_Iallgather),
	    ENTRY(MPI_Test),
	    HANDLE(comm_world, "ompi_mpi_comm_world"),
	    HANDLE(dt_byte, "ompi_mpi_byte"),
	    HANDLE(dt_float, "ompi_mpi_float"),
	    HANDLE(dt_int64, "ompi_mpi_int64_t"),
	    HANDLE(op_sum, "ompi_mpi_op_sum"),
	    HANDLE(errors_return, "ompi_mpi_errors_return"),
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
