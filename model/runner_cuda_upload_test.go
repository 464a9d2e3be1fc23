package model

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-llm/turnstile/cuda"
)

// recordingCopier records the calls uploadFromHost makes.
type recordingCopier struct {
	calls   []string
	copyErr error
}

func (r *recordingCopier) CopyHtoD(dst cuda.DevicePtr, src []byte) error {
	r.calls = append(r.calls, "copy")
	return r.copyErr
}

func (r *recordingCopier) Synchronize() error {
	r.calls = append(r.calls, "sync")
	return nil
}

// TestUploadFromHostSynchronises: every copy from host memory is followed by
// a context-wide synchronise before uploadFromHost returns (a failed copy
// returns its error at once).
func TestUploadFromHostSynchronises(t *testing.T) {
	c := &recordingCopier{}
	require.NoError(t, uploadFromHost(c, 1, []byte{1, 2, 3}))
	require.NoError(t, uploadFromHost(c, 2, []byte{4}))
	require.Equal(t, []string{"copy", "sync", "copy", "sync"}, c.calls)

	c = &recordingCopier{copyErr: errors.New("boom")}
	require.ErrorContains(t, uploadFromHost(c, 1, []byte{1}), "boom")
	require.Equal(t, []string{"copy"}, c.calls)
}

// TestUploadsGoThroughTheHelper: no code of this package but uploadFromHost
// calls CopyHtoD (a synchronous copy from pageable memory), so the
// unsynchronised-upload hazard cannot come back unseen.
func TestUploadsGoThroughTheHelper(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		require.NoError(t, err)
		f, err := parser.ParseFile(fset, name, src, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Name.Name == "uploadFromHost" {
				continue
			}
			ast.Inspect(fn, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "CopyHtoD" {
					t.Errorf("%s: %s calls CopyHtoD; copy host memory to the device through uploadFromHost", fset.Position(sel.Pos()), fn.Name.Name)
				}
				return true
			})
		}
	}
}
