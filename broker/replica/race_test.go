//go:build race

package replica_test

// Under the race detector the simulation runs a tenth of its seeds;
// `make full-size` runs thousands without it.
const raceEnabled = true
