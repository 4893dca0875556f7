//go:build !race

package cascade

const keyRaceEnabled = false
