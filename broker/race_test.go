//go:build race

package broker

// Under the race detector the million-message compaction test sends 4,000;
// `make full-size` runs it at full size without the detector.
const raceScale = 250
