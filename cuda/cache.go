package cuda

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
)

// Compiler is what CubinCache needs from NVRTC.
type Compiler interface {
	Compile(src, name, arch string, opts []string) (cubin []byte, log string, err error)
	VersionString() string
}

// CubinCache compiles kernel sources through a Compiler and keeps the cubins on
// disk, keyed by CacheKey, so that a warm start only reads files.
type CubinCache struct {
	dir      string
	c        Compiler
	compiles atomic.Int64
	hits     atomic.Int64
}

// DefaultCacheDir is <user cache dir>/turnstile/cubin.
func DefaultCacheDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("cuda: cubin cache directory: %w", err)
	}
	return filepath.Join(d, "turnstile", "cubin"), nil
}

// NewCubinCache makes a cache in dir (DefaultCacheDir when empty), creating it.
func NewCubinCache(c Compiler, dir string) (*CubinCache, error) {
	if dir == "" {
		d, err := DefaultCacheDir()
		if err != nil {
			return nil, err
		}
		dir = d
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cuda: cubin cache directory %s: %w", dir, err)
	}
	return &CubinCache{dir: dir, c: c}, nil
}

// Dir is the cache directory.
func (cc *CubinCache) Dir() string { return cc.dir }

// Stats counts the compilations run and the cache hits served.
func (cc *CubinCache) Stats() (compiles, hits int64) { return cc.compiles.Load(), cc.hits.Load() }

// CacheKey is the hex sha256 of the source, architecture, compiler version and
// options, each length-prefixed so no two inputs share a key by concatenation.
func CacheKey(src, arch, compilerVersion string, opts []string) string {
	h := sha256.New()
	put := func(s string) {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	put(src)
	put(arch)
	put(compilerVersion)
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(opts)))
	h.Write(n[:])
	for _, o := range opts {
		put(o)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Get returns the cubin of src for arch and opts, from disk when present and
// valid, else compiled and stored. A damaged file is recompiled and replaced.
func (cc *CubinCache) Get(src, name, arch string, opts []string) ([]byte, error) {
	key := CacheKey(src, arch, cc.c.VersionString(), opts)
	path := filepath.Join(cc.dir, key+".cubin")
	b, err := os.ReadFile(path)
	switch {
	case err == nil && checkELF(b) == nil:
		cc.hits.Add(1)
		return b, nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("cuda: read cached cubin %s: %w", path, err)
	}
	cc.compiles.Add(1)
	cubin, _, err := cc.c.Compile(src, name, arch, opts)
	if err != nil {
		return nil, err
	}
	if err := checkELF(cubin); err != nil {
		return nil, fmt.Errorf("cuda: compile %s for %s: %w", name, arch, err)
	}
	if err := writeAtomic(path, cubin); err != nil {
		return nil, err
	}
	return cubin, nil
}

// writeAtomic writes through a temporary file and a rename, so that concurrent
// processes never read a half-written cubin.
func writeAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return fmt.Errorf("cuda: write cubin cache: %w", err)
	}
	_, werr := f.Write(b)
	cerr := f.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(f.Name(), path)
	}
	if werr != nil {
		os.Remove(f.Name())
		return fmt.Errorf("cuda: write cubin cache %s: %w", path, werr)
	}
	return nil
}
