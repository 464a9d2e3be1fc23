package model

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"

	"github.com/turnstile-llm/turnstile/internal/hugemem"
	"github.com/turnstile-llm/turnstile/kernels"
	"github.com/turnstile-llm/turnstile/model/gguf"
	"github.com/turnstile-llm/turnstile/model/safetensors"
	"github.com/turnstile-llm/turnstile/model/tokenizer"
)

// LlamaOptions adjusts how a llama model is loaded.
type LlamaOptions struct {
	// MaxContext caps the context length the runner accepts (0: the file's
	// llama.context_length). It may only lower the file's value.
	MaxContext int
	// Mmap keeps the matrices in the file mapping (shared page cache, 4 KiB
	// pages) instead of copying them into huge-page memory at load. The
	// copy is what the CPU runner wants: a decode step streams every
	// matrix once, and with 4 KiB pages the TLB misses alone cost the
	// 110M BF16 model a third or more of its decode speed on a VM (see
	// hugemem). A
	// runner that uploads the weights elsewhere (CUDA) sets it.
	Mmap bool
}

// Llama is a loaded llama-family model: its configuration, its tokenizer
// and every weight bound as a kernels.Matrix. The matrices a step streams
// (every layer's and the output projection) live in one huge-page region
// owned by the Llama, or, with LlamaOptions.Mmap or from NewLlama, alias the
// memory-mapped file; the token embedding, read a row per token, always
// aliases the file. A Llama is valid until Close; norm weights are small
// and copied to float32. A Llama is read-only after
// loading and may back several runners at once.
type Llama struct {
	cfg        gguf.LlamaConfig
	maxContext int
	tok        *tokenizer.Tokenizer
	file       *gguf.File          // owned when loaded from a path; nil otherwise
	shards     []*safetensors.File // a Hugging Face checkpoint's mapped files
	weights    *hugemem.Region     // the streamed matrices, unless Mmap; owned
	// chatTemplate is the model's own chat template (GGUF
	// tokenizer.chat_template or tokenizer_config.json's), "" if none.
	chatTemplate string
	// stopIDs are the tokens that end generation: EOS, GGUF
	// tokenizer.ggml.eot_token_id, generation_config.json's eos_token_id.
	stopIDs []int32

	embd    kernels.Matrix // [Vocab][Dim]
	outNorm []float32      // [Dim]
	output  kernels.Matrix // [Vocab][Dim]
	layers  []llamaLayer
	// ropeFreqs is the rotation of each of the HeadDim/2 pairs in radians
	// per position (base, scaling and llama3 factors folded in).
	ropeFreqs []float64
}

// llamaLayer is one transformer block. Matrices are [out][in] (y = x·Wᵀ).
type llamaLayer struct {
	attnNorm, ffnNorm []float32 // [Dim]
	q, k, v, o        kernels.Matrix
	gate, up, down    kernels.Matrix
	// qBias [Heads·HeadDim], kBias, vBias [KVHeads·HeadDim]: nil unless
	// the architecture has Q/K/V biases (qwen2).
	qBias, kBias, vBias []float32
	// qNorm, kNorm [HeadDim]: per-head RMSNorm weights of Q and K before
	// RoPE; nil unless the architecture has them (qwen3).
	qNorm, kNorm []float32
}

// LoadLlama is the one model entry point: path is a GGUF file, or a
// Hugging Face checkpoint directory (config.json, model.safetensors or its
// sharded index, tokenizer.json, tokenizer_config.json, optional
// generation_config.json). The file is memory-mapped; the matrices a step
// streams are then copied into huge-page memory unless opts.Mmap. Close
// releases both. Errors name path once.
func LoadLlama(path string, opts LlamaOptions) (*Llama, error) {
	var m *Llama
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		if m, err = loadHF(path, opts); err != nil {
			return nil, fmt.Errorf("model: load %s: %w", path, err)
		}
	} else {
		f, err := gguf.Open(path)
		if err != nil {
			// Open's errors already name the file.
			return nil, fmt.Errorf("model: load: %w", err)
		}
		if m, err = NewLlama(f, opts); err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("model: load %s: %w", path, err)
		}
		m.file = f
	}
	if !opts.Mmap {
		if err := m.residentWeights(); err != nil {
			return nil, errors.Join(fmt.Errorf("model: load %s: %w", path, err), m.Close())
		}
	}
	return m, nil
}

// residentWeights copies the matrices a step streams out of the file
// mapping into one huge-page region (each 64-byte aligned), points them
// at it, and drops the mapping's resident pages so that the copied bytes
// are not counted twice in the resident set.
func (m *Llama) residentWeights() error {
	// A tied output shares the embedding's bytes (it may be their first
	// rows): the embedding moves instead, and the output stays a view of
	// it, so the two remain one copy (the CUDA plan uploads them once).
	tied := m.outputTied()
	out := &m.output
	if tied {
		out = &m.embd
	}
	mats := []*kernels.Matrix{out}
	for li := range m.layers {
		l := &m.layers[li]
		mats = append(mats, &l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down)
	}
	offs := make([]int, len(mats))
	total := 0
	for i, w := range mats {
		offs[i] = total
		total += (len(w.Data) + 63) &^ 63
	}
	if total == 0 {
		return nil
	}
	r, err := hugemem.Alloc(total)
	if err != nil {
		return fmt.Errorf("weights: %w", err)
	}
	m.weights = r
	// The region lives outside the Go heap: free it if the model is
	// dropped without Close.
	runtime.AddCleanup(m, func(r *hugemem.Region) { _ = r.Free() }, r)
	b := r.Bytes()
	for i, w := range mats {
		n := len(w.Data)
		copy(b[offs[i]:offs[i]+n], w.Data)
		// Each matrix's file pages go as soon as it is copied, so that the
		// peak resident set is the copy plus one matrix, not twice the model.
		if err := m.releaseFilePages(w.Data); err != nil {
			return fmt.Errorf("weights: %w", err)
		}
		w.Data = b[offs[i] : offs[i]+n : offs[i]+n]
	}
	if tied {
		m.output.Data = m.embd.Data[:len(m.output.Data):len(m.output.Data)]
	}
	return nil
}

// outputTied reports whether the output projection shares the token
// embedding's bytes (tied embeddings; the output may be their first rows).
func (m *Llama) outputTied() bool {
	return len(m.output.Data) > 0 && len(m.embd.Data) > 0 && &m.output.Data[0] == &m.embd.Data[0]
}

// releaseFilePages drops the resident pages of b (bytes of the model's
// mapped files) from the process; b stays readable.
func (m *Llama) releaseFilePages(b []byte) error {
	var errs []error
	if m.file != nil {
		errs = append(errs, m.file.ReleasePages(b))
	}
	for _, s := range m.shards {
		errs = append(errs, s.ReleasePages(b))
	}
	return errors.Join(errs...)
}

// NewLlama binds the llama weights and tokenizer of an open GGUF file. The
// file stays owned by the caller and must outlive the Llama (Close does not
// close it).
func NewLlama(f *gguf.File, opts LlamaOptions) (*Llama, error) {
	w, err := f.Llama()
	if err != nil {
		return nil, err
	}
	c := w.Config
	if c.RopeDim != c.HeadDim {
		// Partial rotary embeddings are not part of the llama architecture
		// the kernels implement; refuse rather than compute the wrong thing.
		return nil, fmt.Errorf("model: llama.rope.dimension_count = %d, only full-head RoPE (head dim %d) is supported", c.RopeDim, c.HeadDim)
	}
	m := &Llama{cfg: c, maxContext: c.ContextLength}
	if err := m.setContext(opts); err != nil {
		return nil, err
	}
	var factors []float32
	if w.RopeFreqs != nil {
		if factors, err = w.RopeFreqs.Float32s(); err != nil {
			return nil, fmt.Errorf("model: tensor %q: %w", w.RopeFreqs.Name, err)
		}
	}
	if m.ropeFreqs, err = c.RopeFrequencies(factors); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if m.tok, err = tokenizer.FromGGUF(f); err != nil {
		return nil, fmt.Errorf("model: tokenizer: %w", err)
	}
	if m.tok.VocabSize() != c.Vocab {
		return nil, fmt.Errorf("model: tokenizer has %d tokens, token_embd.weight has %d rows", m.tok.VocabSize(), c.Vocab)
	}
	if f.Has("tokenizer.chat_template") {
		if m.chatTemplate, err = f.String("tokenizer.chat_template"); err != nil {
			return nil, fmt.Errorf("model: %w", err)
		}
	}
	var stops []int32
	if f.Has("tokenizer.ggml.eot_token_id") {
		// Llama 3 chat turns end with <|eot_id|>, not EOS.
		eot, err := f.Int("tokenizer.ggml.eot_token_id")
		if err != nil {
			return nil, fmt.Errorf("model: %w", err)
		}
		stops = append(stops, int32(eot))
	}
	if err := m.setStopIDs(stops); err != nil {
		return nil, fmt.Errorf("model: tokenizer.ggml.eot_token_id: %w", err)
	}
	if m.embd, err = matrix(w.TokenEmbd); err != nil {
		return nil, err
	}
	if m.output, err = matrix(w.Output); err != nil {
		return nil, err
	}
	if m.outNorm, err = w.OutputNorm.Float32s(); err != nil {
		return nil, fmt.Errorf("model: tensor %q: %w", w.OutputNorm.Name, err)
	}
	m.layers = make([]llamaLayer, c.Layers)
	for i := range w.Layers {
		src, dst := &w.Layers[i], &m.layers[i]
		if dst.attnNorm, err = src.AttnNorm.Float32s(); err != nil {
			return nil, fmt.Errorf("model: tensor %q: %w", src.AttnNorm.Name, err)
		}
		if dst.ffnNorm, err = src.FFNNorm.Float32s(); err != nil {
			return nil, fmt.Errorf("model: tensor %q: %w", src.FFNNorm.Name, err)
		}
		for _, p := range []struct {
			dst *[]float32
			src *gguf.TensorInfo
		}{{&dst.qBias, src.QBias}, {&dst.kBias, src.KBias}, {&dst.vBias, src.VBias}, {&dst.qNorm, src.QNorm}, {&dst.kNorm, src.KNorm}} {
			if p.src == nil {
				continue
			}
			if *p.dst, err = p.src.Float32s(); err != nil {
				return nil, fmt.Errorf("model: tensor %q: %w", p.src.Name, err)
			}
		}
		for _, p := range []struct {
			dst *kernels.Matrix
			src *gguf.TensorInfo
		}{
			{&dst.q, src.Q}, {&dst.k, src.K}, {&dst.v, src.V}, {&dst.o, src.O},
			{&dst.gate, src.Gate}, {&dst.up, src.Up}, {&dst.down, src.Down},
		} {
			if *p.dst, err = matrix(p.src); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// setContext applies opts.MaxContext. A sliding window needs no cap here:
// both runners' attention kernels mask it.
func (m *Llama) setContext(opts LlamaOptions) error {
	c := m.cfg
	if opts.MaxContext < 0 || opts.MaxContext > c.ContextLength {
		return fmt.Errorf("model: MaxContext %d outside [0, %d] (the file's context length)", opts.MaxContext, c.ContextLength)
	}
	if opts.MaxContext > 0 {
		m.maxContext = opts.MaxContext
	}
	return nil
}

// setStopIDs sets the stop list to the tokenizer's EOS (when it has one)
// and extra, each checked against the vocabulary, without repeats.
func (m *Llama) setStopIDs(extra []int32) error {
	ids := extra
	if eos := m.tok.EOS(); eos >= 0 {
		ids = append([]int32{eos}, extra...)
	}
	m.stopIDs = nil
	for _, id := range ids {
		if id < 0 || int(id) >= m.cfg.Vocab {
			return fmt.Errorf("stop token %d outside the vocabulary [0, %d)", id, m.cfg.Vocab)
		}
		if !slices.Contains(m.stopIDs, id) {
			m.stopIDs = append(m.stopIDs, id)
		}
	}
	return nil
}

// StopIDs are the tokens that end generation (EOS first when the tokenizer
// has one, then end-of-turn and generation_config.json's eos_token_id
// entries). The slice is the model's; do not modify it.
func (m *Llama) StopIDs() []int32 { return m.stopIDs }

// ChatTemplate is the model's own chat template (GGUF
// tokenizer.chat_template, or tokenizer_config.json's chat_template), ""
// when it has none.
func (m *Llama) ChatTemplate() string { return m.chatTemplate }

// attnWindow is the kernels' AttnSeq.Window for every layer: the sliding
// window in positions, or 0 when there is none or the context cannot
// outgrow it (the window then masks nothing). Transformers' Mistral masks
// it (see kernels.AttnSeq); llama.cpp's llama architecture reads no window
// and attends to every position, so past the window its logits differ.
func (m *Llama) attnWindow() int32 {
	if w := m.cfg.SlidingWindow; w > 0 && w < m.maxContext {
		return int32(w)
	}
	return 0
}

// matrix views a 2-D GGUF tensor (Dims [in, out]) as a kernels.Matrix
// [out][in] without copying.
func matrix(t *gguf.TensorInfo) (kernels.Matrix, error) {
	if len(t.Dims) != 2 {
		return kernels.Matrix{}, fmt.Errorf("model: tensor %q has shape %s, want 2 dimensions", t.Name, t.Shape())
	}
	m := kernels.Matrix{Type: kernels.DType(t.Type), Rows: int(t.Dims[1]), Cols: int(t.Dims[0]), Data: t.Data}
	if err := m.Validate(); err != nil {
		return kernels.Matrix{}, fmt.Errorf("model: tensor %q (%v %s): %w", t.Name, t.Type, t.Shape(), err)
	}
	return m, nil
}

// Config returns the model's configuration.
func (m *Llama) Config() gguf.LlamaConfig { return m.cfg }

// MaxContext is the longest sequence (prompt + output) in tokens that
// runners of this model accept.
func (m *Llama) MaxContext() int { return m.maxContext }

// Tokenizer returns the model's tokenizer (immutable, safe to share).
func (m *Llama) Tokenizer() *tokenizer.Tokenizer { return m.tok }

// WeightBytes is the number of weight bytes one decode step streams per
// token: every matrix of every layer plus the output projection (the
// embedding table is read one row per token and not counted, unless it is
// also the tied output).
func (m *Llama) WeightBytes() int64 {
	n := int64(len(m.output.Data))
	for i := range m.layers {
		l := &m.layers[i]
		for _, w := range []*kernels.Matrix{&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down} {
			n += int64(len(w.Data))
		}
	}
	return n
}

// MLPWeightBytes is the bytes of the whole MLP (gate, up and down of every
// layer), which a sharded runner splits across ranks.
func (m *Llama) MLPWeightBytes() int64 {
	var n int64
	for i := range m.layers {
		l := &m.layers[i]
		n += int64(len(l.gate.Data) + len(l.up.Data) + len(l.down.Data))
	}
	return n
}

// MatMulFLOPs is the floating-point operations of the weight matrices for
// one token (2 per multiply-add), excluding attention over the context.
func (m *Llama) MatMulFLOPs() int64 {
	n := int64(m.output.Rows) * int64(m.output.Cols)
	for i := range m.layers {
		l := &m.layers[i]
		for _, w := range []*kernels.Matrix{&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down} {
			n += int64(w.Rows) * int64(w.Cols)
		}
	}
	return 2 * n
}

// Close releases the weights' memory and the memory-mapped file when
// LoadLlama opened it. Runners of the model must be closed first.
func (m *Llama) Close() error {
	errs := []error{m.weights.Free()}
	m.weights = nil
	for _, s := range m.shards {
		errs = append(errs, s.Close())
	}
	m.shards = nil
	if m.file != nil {
		errs = append(errs, m.file.Close())
		m.file = nil
	}
	return errors.Join(errs...)
}
