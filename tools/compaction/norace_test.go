//go:build !race

package compaction_test

const raceScale = 1
