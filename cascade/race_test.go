//go:build race

package cascade

const raceEnabled = true
