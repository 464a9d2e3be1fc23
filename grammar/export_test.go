package grammar

// RaceEnabled tells the external tests (package grammar_test) whether the
// race detector is on.
const RaceEnabled = raceEnabled
