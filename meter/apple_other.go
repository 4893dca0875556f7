//go:build !darwin

package meter

// newApple: the Apple Silicon counters exist only on macOS.
func newApple() (*apple, error) { return nil, errNotDarwin }
