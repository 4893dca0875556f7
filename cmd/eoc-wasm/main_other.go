//go:build !(js && wasm)

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// main resolves each argument and prints its result as one JSON line: the browser's results,
// for a terminal or a test.
func main() {
	b, err := newBrowserCascade(clockTick(250 * time.Millisecond))
	if err != nil {
		fmt.Fprintln(os.Stderr, "eoc-wasm:", err)
		os.Exit(1)
	}
	enc := json.NewEncoder(os.Stdout)
	for _, q := range os.Args[1:] {
		if err := enc.Encode(b.resolve(q)); err != nil {
			fmt.Fprintln(os.Stderr, "eoc-wasm:", err)
			os.Exit(1)
		}
	}
}
