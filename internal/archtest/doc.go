// Package archtest holds the tests of the module as a whole, not of one
// package: the import boundaries docs/architecture.md draws (deps_test.go,
// through `go list -deps`) and that every package.Identifier a comment or a
// doc page names still exists (docrefs_test.go).
package archtest
