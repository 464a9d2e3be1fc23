// quant-ref: prints what ggml itself decodes, for the quantised-type
// fixtures under testdata/quant (see make-quant-fixtures.sh; built against
// llama.cpp's libggml-base, never by `make test`).
//
//   quant-ref file LABEL IN.gguf   one line per tensor of IN.gguf
//   quant-ref random               one line per type: pseudo-random blocks
//
// A line is "file LABEL TENSOR TYPE N FNV HEAD" or "random TYPE NBLOCKS FNV
// HEAD": N the elements, FNV the 64-bit FNV-1a of the dequantised float32
// values (little-endian bytes, in element order), HEAD the bits of the first
// eight values, comma-separated hex. Decoding is ggml's to_float (the
// dequantize_row_* of ggml-quants.c).
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"
#include "gguf.h"

static uint64_t fnv1a(const float *v, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  const unsigned char *p = (const unsigned char *)v;
  for (size_t i = 0; i < 4 * n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

static void print_vals(const float *v, size_t n) {
  printf(" %016" PRIx64 " ", fnv1a(v, n));
  for (size_t i = 0; i < 8 && i < n; i++) {
    uint32_t b;
    memcpy(&b, &v[i], 4);
    printf("%s%08" PRIx32, i ? "," : "", b);
  }
  printf("\n");
}

// The byte offsets of a block's F16 fields; the random blocks clear their
// top exponent bit so that every scale is finite (|v| < 2).
static int f16_fields(enum ggml_type t, int off[2]) {
  switch (t) {
    case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_1: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K:
      off[0] = 0; off[1] = 2; return 2;
    case GGML_TYPE_Q2_K: off[0] = 80; off[1] = 82; return 2;
    case GGML_TYPE_Q3_K: off[0] = 108; return 1;
    case GGML_TYPE_Q6_K: off[0] = 208; return 1;
    default: off[0] = 0; return 1;
  }
}

static const enum ggml_type types[] = {
    GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q8_0,
    GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};

// random: 64 blocks per type of xorshift64* bytes (seed 0x5eed + type id,
// one byte per step: the top byte of each output), F16 fields masked.
static int run_random(void) {
  enum { NB = 64 };
  for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
    enum ggml_type t = types[ti];
    const struct ggml_type_traits *tr = ggml_get_type_traits(t);
    size_t bs = tr->type_size, be = (size_t)tr->blck_size;
    unsigned char *buf = malloc(NB * bs);
    float *out = malloc(NB * be * sizeof(float));
    uint64_t s = 0x5eedull + (uint64_t)t;
    for (size_t i = 0; i < NB * bs; i++) {
      s ^= s >> 12; s ^= s << 25; s ^= s >> 27;
      buf[i] = (unsigned char)((s * 0x2545f4914f6cdd1dull) >> 56);
    }
    int off[2], nf = f16_fields(t, off);
    for (size_t b = 0; b < NB; b++)
      for (int f = 0; f < nf; f++) buf[b * bs + (size_t)off[f] + 1] &= 0xbf;
    tr->to_float(buf, out, (int64_t)(NB * be));
    printf("random %s %d", tr->type_name, NB);
    print_vals(out, NB * be);
    free(buf);
    free(out);
  }
  return 0;
}

static int run_file(const char *label, const char *path) {
  struct gguf_init_params p = {.no_alloc = true, .ctx = NULL};
  struct gguf_context *g = gguf_init_from_file(path, p);
  if (!g) {
    fprintf(stderr, "quant-ref: cannot read %s\n", path);
    return 1;
  }
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "quant-ref: cannot open %s\n", path);
    return 1;
  }
  size_t base = gguf_get_data_offset(g);
  for (int64_t i = 0; i < gguf_get_n_tensors(g); i++) {
    enum ggml_type t = gguf_get_tensor_type(g, i);
    const struct ggml_type_traits *tr = ggml_get_type_traits(t);
    if (!tr->is_quantized) continue;
    const int64_t *ne = gguf_get_tensor_ne(g, i);
    size_t n = (size_t)(ne[0] * ne[1] * ne[2] * ne[3]);
    size_t sz = gguf_get_tensor_size(g, i);
    unsigned char *buf = malloc(sz);
    float *out = malloc(n * sizeof(float));
    if (fseek(f, (long)(base + gguf_get_tensor_offset(g, i)), SEEK_SET) != 0 ||
        fread(buf, 1, sz, f) != sz) {
      fprintf(stderr, "quant-ref: %s: short read of %s\n", path, gguf_get_tensor_name(g, i));
      return 1;
    }
    tr->to_float(buf, out, (int64_t)n);
    printf("file %s %s %s %zu", label, gguf_get_tensor_name(g, i), tr->type_name, n);
    print_vals(out, n);
    free(buf);
    free(out);
  }
  fclose(f);
  gguf_free(g);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "random") == 0) return run_random();
  if (argc == 4 && strcmp(argv[1], "file") == 0) return run_file(argv[2], argv[3]);
  fprintf(stderr, "usage: quant-ref random | quant-ref file LABEL IN.gguf\n");
  return 2;
}
