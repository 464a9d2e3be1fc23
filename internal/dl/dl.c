// dlopen over a list of candidate names (see dl.go).
#include "dl.h"

#include <dlfcn.h>
#include <stdio.h>

void *tsdl_open(const char *const *names, int n, int global, int *which, char *err, size_t errlen) {
	if (errlen > 0)
		err[0] = 0;
	int mode = RTLD_NOW | (global ? RTLD_GLOBAL : RTLD_LOCAL);
	for (int i = 0; i < n; i++) {
		void *h = dlopen(names[i], mode);
		if (h != NULL) {
			*which = i;
			return h;
		}
		const char *e = dlerror();
		if (e != NULL && errlen > 0)
			snprintf(err, errlen, "%s", e);
	}
	return NULL;
}

void tsdl_close(void *handle) {
	if (handle != NULL)
		dlclose(handle);
}
