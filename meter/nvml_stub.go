//go:build nonvml || !cgo

package meter

import "fmt"

// newNVML reports that this binary was built without NVML.
func newNVML() (*gpus, error) { return nil, fmt.Errorf("%w: built with the nonvml tag", ErrNoData) }
