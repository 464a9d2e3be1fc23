// llama-logits: llama.cpp's own teacher-forced logits for a token sequence,
// the reference of model's TestQ4KMMatchesLlamaCpp (see
// make-quant-fixtures.sh; built against llama.cpp's libllama, never by
// `make test`).
//
//   llama-logits [-g N] [-h] MODEL.gguf OUT.bin TOKEN...
//
// One llama_decode of all tokens at positions 0..n-1 with logits for every
// position; F32 KV cache and no flash attention, so that only llama.cpp's
// matmul arithmetic differs from an exact evaluation. OUT.bin is
// little-endian: u32 n, u32 vocab, i32 tokens[n], f32 logits[n][vocab];
// with -g N it continues greedily (first largest logit) for N tokens after
// the sequence, one llama_decode each, and appends u32 N, i32 greedy[N]
// (make-arch-fixtures.sh). With -s each token is its own llama_decode
// (the decode path, as turnstile's teacher-forced steps) instead of one
// batch of all. With -h the logits are IEEE binary16 (u16,
// round to nearest even) instead of f32: make-matrix-fixtures.sh keeps the
// quantised types' references at half the size, their tolerances being far
// above binary16's 2^-11 relative rounding.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "llama.h"

// half rounds a finite float to binary16, to nearest even; logits of these
// models are far inside binary16's range, so overflow is not handled.
static uint16_t half(float x) {
  uint32_t b;
  memcpy(&b, &x, 4);
  const uint16_t sign = (uint16_t)((b >> 16) & 0x8000);
  const float a = fabsf(x);
  if (a < 6.103515625e-05f) {  // subnormal: units of 2^-24
    return (uint16_t)(sign | (uint16_t)lrintf(a * 16777216.0f));
  }
  uint32_t m = b & 0x7fffffff;
  // Drop 13 mantissa bits, rounding to nearest even, then rebias 127 → 15.
  m += 0x0fff + ((m >> 13) & 1);
  return (uint16_t)(sign | (uint16_t)((m >> 13) - ((127 - 15) << 10)));
}

int main(int argc, char **argv) {
  int greedy = 0;
  bool f16 = false, seq = false;
  for (;;) {
    if (argc > 2 && strcmp(argv[1], "-g") == 0) {
      greedy = atoi(argv[2]);
      argv += 2;
      argc -= 2;
    } else if (argc > 1 && strcmp(argv[1], "-h") == 0) {
      f16 = true;
      argv++;
      argc--;
    } else if (argc > 1 && strcmp(argv[1], "-s") == 0) {
      seq = true;
      argv++;
      argc--;
    } else {
      break;
    }
  }
  if (argc < 4) {
    fprintf(stderr, "usage: llama-logits [-g N] [-h] [-s] MODEL.gguf OUT.bin TOKEN...\n");
    return 2;
  }
  std::vector<llama_token> toks;
  for (int i = 3; i < argc; i++) toks.push_back((llama_token)atoi(argv[i]));
  const int n = (int)toks.size();
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  llama_model *model = llama_model_load_from_file(argv[1], mp);
  if (!model) {
    fprintf(stderr, "llama-logits: cannot load %s\n", argv[1]);
    return 1;
  }
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 256;
  cp.n_batch = cp.n_ubatch = 256;
  cp.n_threads = cp.n_threads_batch = 1;
  cp.type_k = cp.type_v = GGML_TYPE_F32;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  llama_context *ctx = llama_init_from_model(model, cp);
  if (!ctx) {
    fprintf(stderr, "llama-logits: cannot make a context\n");
    return 1;
  }
  const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  // all[i] is the logits row after token i: one batch of every token, or
  // with -s one llama_decode per token (llama.cpp's decode path, a
  // single-row matmul each, as turnstile's teacher-forced steps).
  std::vector<float> all((size_t)n * vocab);
  llama_batch b = llama_batch_init(n, 0, 1);
  for (int i0 = 0; i0 < n;) {
    const int m = seq ? 1 : n;
    for (int i = 0; i < m; i++) {
      b.token[i] = toks[i0 + i];
      b.pos[i] = i0 + i;
      b.n_seq_id[i] = 1;
      b.seq_id[i][0] = 0;
      b.logits[i] = 1;
    }
    b.n_tokens = m;
    if (llama_decode(ctx, b) != 0) {
      fprintf(stderr, "llama-logits: decode failed\n");
      return 1;
    }
    for (int i = 0; i < m; i++)
      memcpy(&all[(size_t)(i0 + i) * vocab], llama_get_logits_ith(ctx, i), 4 * (size_t)vocab);
    i0 += m;
  }
  FILE *f = fopen(argv[2], "wb");
  if (!f) {
    fprintf(stderr, "llama-logits: cannot write %s\n", argv[2]);
    return 1;
  }
  uint32_t hdr[2] = {(uint32_t)n, (uint32_t)vocab};
  fwrite(hdr, 4, 2, f);
  fwrite(toks.data(), 4, (size_t)n, f);
  std::vector<uint16_t> h((size_t)vocab);
  for (int i = 0; i < n; i++) {
    const float *row = &all[(size_t)i * vocab];
    if (!f16) {
      fwrite(row, 4, (size_t)vocab, f);
      continue;
    }
    for (int v = 0; v < vocab; v++) h[v] = half(row[v]);
    fwrite(h.data(), 2, (size_t)vocab, f);
  }
  if (greedy > 0) {
    std::vector<llama_token> gen;
    const float *row = &all[(size_t)(n - 1) * vocab];
    for (int g = 0; g < greedy; g++) {
      llama_token best = 0;
      for (int v = 1; v < vocab; v++)
        if (row[v] > row[best]) best = v;
      gen.push_back(best);
      if (g + 1 == greedy) break;
      llama_batch one = llama_batch_init(1, 0, 1);
      one.token[0] = best;
      one.pos[0] = n + g;
      one.n_seq_id[0] = 1;
      one.seq_id[0][0] = 0;
      one.logits[0] = 1;
      one.n_tokens = 1;
      if (llama_decode(ctx, one) != 0) {
        fprintf(stderr, "llama-logits: greedy decode failed\n");
        return 1;
      }
      llama_batch_free(one);
      row = llama_get_logits_ith(ctx, 0);
    }
    uint32_t ng = (uint32_t)gen.size();
    fwrite(&ng, 4, 1, f);
    fwrite(gen.data(), 4, gen.size(), f);
  }
  fclose(f);
  llama_batch_free(b);
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
