#ifndef TURNSTILE_DL_H
#define TURNSTILE_DL_H

#include <stddef.h>

// tsdl_open dlopens the first loadable name in names (n entries), with
// RTLD_GLOBAL when global is non-zero (else RTLD_LOCAL). On success it sets
// *which to that name's index; on failure it returns NULL with the loader's
// last message in err.
void *tsdl_open(const char *const *names, int n, int global, int *which, char *err, size_t errlen);
void tsdl_close(void *handle);

#endif
