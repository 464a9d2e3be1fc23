//go:build race

package grammar

// raceEnabled is true under -race: the long single-goroutine tests skip
// there (the detector finds nothing in them and slows them tenfold); the
// non-race pass of `make test` runs them.
const raceEnabled = true
