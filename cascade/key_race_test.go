//go:build race

package cascade

const keyRaceEnabled = true
