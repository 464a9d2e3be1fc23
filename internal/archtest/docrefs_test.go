package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// typeRef names a type: its package's import path and its name.
type typeRef struct{ path, name string }

// pkgIndex is what one package declares, tests included (a comment may
// cite a test): top-level names, and per type its fields, methods and
// embedded types, with each field's type when it is a named one.
type pkgIndex struct {
	names    map[string]bool
	members  map[string]map[string]bool
	fields   map[string]map[string]typeRef
	embedded map[string][]typeRef
}

// moduleIndex indexes every package of the module by import path, and the
// import paths by package name.
type moduleIndex struct {
	module string
	pkgs   map[string]*pkgIndex
	byName map[string][]string
}

// moduleRoot is the directory holding go.mod, above this package's.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "no go.mod above the test's directory")
		dir = parent
	}
}

// skipDir reports the directories that hold no package of the module.
func skipDir(name string) bool {
	return strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor" ||
		name == "out" || name == "bin"
}

// goFiles parses every Go file of the module (comments kept), by directory.
func goFiles(t *testing.T, root string, fset *token.FileSet) map[string][]*ast.File {
	t.Helper()
	files := map[string][]*ast.File{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && skipDir(d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		files[dir] = append(files[dir], f)
		return nil
	})
	require.NoError(t, err)
	return files
}

func buildIndex(t *testing.T, root, module string, files map[string][]*ast.File) *moduleIndex {
	t.Helper()
	m := &moduleIndex{module: module, pkgs: map[string]*pkgIndex{}, byName: map[string][]string{}}
	for dir, fs := range files {
		rel, err := filepath.Rel(root, dir)
		require.NoError(t, err)
		path := module
		if rel != "." {
			path += "/" + filepath.ToSlash(rel)
		}
		p := &pkgIndex{names: map[string]bool{}, members: map[string]map[string]bool{},
			fields: map[string]map[string]typeRef{}, embedded: map[string][]typeRef{}}
		m.pkgs[path] = p
		named := false
		for _, f := range fs {
			if !strings.HasSuffix(f.Name.Name, "_test") && f.Name.Name != "main" && !named {
				m.byName[f.Name.Name] = append(m.byName[f.Name.Name], path)
				named = true
			}
			p.add(f, path, m.importsOf(f))
		}
	}
	return m
}

// importsOf maps the names a file refers to its imports of this module by.
func (m *moduleIndex) importsOf(f *ast.File) map[string]string {
	out := map[string]string{}
	for _, im := range f.Imports {
		path, err := strconv.Unquote(im.Path.Value)
		if err != nil || !strings.HasPrefix(path, m.module+"/") {
			continue
		}
		name := path[strings.LastIndex(path, "/")+1:]
		if im.Name != nil {
			name = im.Name.Name
		}
		out[name] = path
	}
	return out
}

func (p *pkgIndex) member(typ, name string) {
	if p.members[typ] == nil {
		p.members[typ] = map[string]bool{}
	}
	p.members[typ][name] = true
}

// named resolves a field's or an embedded type's expression to a named
// type of this module (ok false for anything else).
func named(e ast.Expr, path string, imports map[string]string) (typeRef, bool) {
	switch x := e.(type) {
	case *ast.StarExpr:
		return named(x.X, path, imports)
	case *ast.Ident:
		return typeRef{path, x.Name}, true
	case *ast.SelectorExpr:
		if id, ok := x.X.(*ast.Ident); ok && imports[id.Name] != "" {
			return typeRef{imports[id.Name], x.Sel.Name}, true
		}
	}
	return typeRef{}, false
}

func (p *pkgIndex) add(f *ast.File, path string, imports map[string]string) {
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				p.names[d.Name.Name] = true
				continue
			}
			if r, ok := named(d.Recv.List[0].Type, path, imports); ok {
				p.member(r.name, d.Name.Name)
			} else if ix, ok := d.Recv.List[0].Type.(*ast.IndexExpr); ok { // generic receiver
				if r, ok := named(ix.X, path, imports); ok {
					p.member(r.name, d.Name.Name)
				}
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.ValueSpec:
					for _, n := range s.Names {
						p.names[n.Name] = true
					}
				case *ast.TypeSpec:
					p.names[s.Name.Name] = true
					p.addType(s.Name.Name, s.Type, path, imports)
				}
			}
		}
	}
}

func (p *pkgIndex) addType(typ string, e ast.Expr, path string, imports map[string]string) {
	var list *ast.FieldList
	switch x := e.(type) {
	case *ast.StructType:
		list = x.Fields
	case *ast.InterfaceType:
		list = x.Methods
	default:
		return
	}
	for _, fld := range list.List {
		r, isNamed := named(fld.Type, path, imports)
		if len(fld.Names) == 0 { // embedded: promotes its members
			if isNamed {
				p.member(typ, r.name)
				p.embedded[typ] = append(p.embedded[typ], r)
			}
			continue
		}
		for _, n := range fld.Names {
			p.member(typ, n.Name)
			if isNamed {
				if p.fields[typ] == nil {
					p.fields[typ] = map[string]typeRef{}
				}
				p.fields[typ][n.Name] = r
			}
		}
	}
}

// has reports whether type r has member name, directly or promoted.
func (m *moduleIndex) has(r typeRef, name string, depth int) bool {
	p := m.pkgs[r.path]
	if p == nil || depth > 4 {
		return false
	}
	if p.members[r.name][name] {
		return true
	}
	for _, e := range p.embedded[r.name] {
		if m.has(e, name, depth+1) {
			return true
		}
	}
	return false
}

// fieldType is the named type of r's field name, if any.
func (m *moduleIndex) fieldType(r typeRef, name string) (typeRef, bool) {
	p := m.pkgs[r.path]
	if p == nil {
		return typeRef{}, false
	}
	ft, ok := p.fields[r.name][name]
	return ft, ok
}

// resolves reports whether sel (Ident, Type.Member, Type.Field.Member, ...)
// names something package path declares.
func (m *moduleIndex) resolves(path string, sel []string) bool {
	p := m.pkgs[path]
	if p == nil || !p.names[sel[0]] {
		return false
	}
	cur := typeRef{path, sel[0]}
	for _, name := range sel[1:] {
		if !m.has(cur, name, 0) {
			return false
		}
		next, ok := m.fieldType(cur, name)
		if !ok {
			// A method, or a field of an unnamed or outside type: what
			// follows cannot be checked by name.
			return true
		}
		cur = next
	}
	return true
}

// docRef is pkg.Ident, pkg.Type.Member, ... or path/pkg.Ident: a package
// name (or a module-relative path) then exported identifier, then members.
var docRef = regexp.MustCompile(`(?:^|[^A-Za-z0-9_./-])((?:[a-z][a-z0-9]*/)*[a-z][a-z0-9]*)\.([A-Z][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)`)

// backticked is a code span of a markdown page.
var backticked = regexp.MustCompile("`[^`\n]+`")

// check reports every reference in text (starting at line) that names a
// package of this module and does not resolve there.
func (m *moduleIndex) check(text, where string, line int, bad *[]string) {
	for _, l := range strings.Split(text, "\n") {
		for _, g := range docRef.FindAllStringSubmatch(l, -1) {
			pkg, sel := g[1], strings.Split(g[2], ".")
			var paths []string
			if strings.Contains(pkg, "/") {
				if _, ok := m.pkgs[m.module+"/"+pkg]; ok {
					paths = []string{m.module + "/" + pkg}
				}
			} else {
				paths = m.byName[pkg]
			}
			if len(paths) == 0 {
				continue // not a package of this module
			}
			ok := false
			for _, p := range paths {
				ok = ok || m.resolves(p, sel)
			}
			if !ok {
				*bad = append(*bad, fmt.Sprintf("%s:%d: %s.%s", where, line, pkg, g[2]))
			}
		}
		line++
	}
}

// TestDocReferences: every pkg.Ident, pkg.Type.Member or path/pkg.Ident that
// a comment of the module's Go files, or a code span of README.md and
// docs/*.md, names in one of this module's packages exists there, so a
// rename or a move cannot leave a stale name behind. Identifiers are
// matched by name (go/parser, no type checking): a type's fields, methods
// and embedded types' members, and a named field's type's members.
func TestDocReferences(t *testing.T) {
	root := moduleRoot(t)
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	mod := regexp.MustCompile(`(?m)^module\s+(\S+)`).FindSubmatch(gomod)
	require.NotNil(t, mod, "go.mod has no module line")
	fset := token.NewFileSet()
	files := goFiles(t, root, fset)
	m := buildIndex(t, root, string(mod[1]), files)
	require.NotEmpty(t, m.byName["executor"], "the index holds the module's packages")

	var bad []string
	for _, fs := range files {
		for _, f := range fs {
			for _, cg := range f.Comments {
				for _, c := range cg.List {
					pos := fset.Position(c.Pos())
					rel, _ := filepath.Rel(root, pos.Filename)
					m.check(c.Text, rel, pos.Line, &bad)
				}
			}
		}
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	for _, page := range append(pages, filepath.Join(root, "README.md")) {
		data, err := os.ReadFile(page)
		require.NoError(t, err)
		rel, _ := filepath.Rel(root, page)
		for i, l := range strings.Split(string(data), "\n") {
			for _, span := range backticked.FindAllString(l, -1) {
				m.check(span, rel, i+1, &bad)
			}
		}
	}
	sort.Strings(bad)
	require.Empty(t, bad, "names in comments and docs that no package of the module declares (renamed or moved?):\n%s", strings.Join(bad, "\n"))
}

// TestDocReferencesCatch: the check itself, on the module's real index:
// names that exist pass, renamed ones are caught, other modules' are left
// alone.
func TestDocReferencesCatch(t *testing.T) {
	root := moduleRoot(t)
	fset := token.NewFileSet()
	m := buildIndex(t, root, "github.com/turnstile-llm/turnstile", goFiles(t, root, fset))
	for _, tc := range []struct {
		text string
		ok   bool
	}{
		{"see executor.Config.Overlap.", true},
		{"(adp.Ablation.Engine.ChargeRetiring)", true},
		{"`dist/mpi.World` satisfies it", true},
		{"kvpool.Pool.Reserve allocates", true},
		{"step.Checker.Validate, and step.FutureToken", true},
		{"its mpi.World.AllgatherInt64Patient", true},
		{"prometheus.Metric and unix.MADV_HUGEPAGE are not ours", true},
		{"adp.Config.Window", false},
		{"kvpool.Reserve allocates", false},
		{"adp.Ablation.Engine.Charge", false},
		{"`dist/mpi.Wrld`", false},
		{"model.FutureToken", false},
	} {
		var bad []string
		m.check(tc.text, "x", 1, &bad)
		require.Equal(t, tc.ok, len(bad) == 0, "%q: %v", tc.text, bad)
	}
}
