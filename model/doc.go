// Package model holds the llama-family model: GGUF loading, the tokenizer, the
// forward pass expressed as kernel calls, and the batch layout every Runner
// (CPU, CUDA, simulated) executes.
package model
