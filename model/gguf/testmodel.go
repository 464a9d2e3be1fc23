package gguf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// TestModelFile is the real model the tests use, relative to the repository root.
const TestModelFile = "testdata/models/stories260K.gguf"

// TestModelPath finds stories260K.gguf for tests: $TURNSTILE_MODEL when set,
// else <repo>/testdata/models/stories260K.gguf where <repo> is the nearest
// directory at or above the working directory holding go.mod. The error
// tells the reader to run `make model`.
func TestModelPath() (string, error) {
	if p := os.Getenv("TURNSTILE_MODEL"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("TURNSTILE_MODEL=%s: %w (run `make model`)", p, err)
		}
		return p, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("test model: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			p := filepath.Join(dir, TestModelFile)
			if _, err := os.Stat(p); err != nil {
				return "", fmt.Errorf("test model %s missing: run `make model`: %w", p, err)
			}
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("test model: no go.mod above the working directory; run `make model` in the repository")
		}
		dir = parent
	}
}
