//go:build !race

package broker

const raceScale = 1
