//go:build race

package compaction_test

// Under the race detector the million-message test runs at a tenth of its
// size; `make test` runs it at full size without the detector too.
const raceScale = 10
