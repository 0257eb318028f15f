//go:build race

package projection

// Under the race detector the replicated test runs a twelfth of its
// seeds: each is a whole simulated cluster.
const raceEnabled = true
