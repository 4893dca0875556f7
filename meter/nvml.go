//go:build !nonvml && cgo

package meter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// newNVML opens the system's NVML. Without libnvidia-ml it returns an error wrapping
// ErrNoData, with NVML's reason.
func newNVML() (*gpus, error) { return openNVML(nvml.New()) }

// openNVML initialises lib and takes every device it lists.
func openNVML(lib nvml.Interface) (*gpus, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%w: nvml: %v", ErrNoData, nvml.ErrorString(ret))
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS || n == 0 {
		err := fmt.Errorf("%w: nvml: no GPU", ErrNoData)
		if ret != nvml.SUCCESS {
			err = fmt.Errorf("nvml: device count: %v", nvml.ErrorString(ret))
		}
		if ret := lib.Shutdown(); ret != nvml.SUCCESS {
			err = errors.Join(err, fmt.Errorf("nvml: shutdown: %v", nvml.ErrorString(ret)))
		}
		return nil, err
	}
	g := &gpus{wait: defaultNVMLWait, poll: 5 * time.Millisecond, now: time.Now, sleep: time.Sleep,
		closeFn: func() error {
			if ret := lib.Shutdown(); ret != nvml.SUCCESS {
				return errors.New(nvml.ErrorString(ret))
			}
			return nil
		}}
	for i := range n {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, errors.Join(fmt.Errorf("nvml: device %d: %v", i, nvml.ErrorString(ret)), g.close())
		}
		name, ret := d.GetName()
		if ret != nvml.SUCCESS {
			name = fmt.Sprintf("gpu%d", i)
		}
		g.devs = append(g.devs, nvmlDevice{d: d, name: name})
	}
	return g, nil
}

// nvmlDevice adapts a go-nvml Device.
type nvmlDevice struct {
	d    nvml.Device
	name string
}

var _ gpuDevice = nvmlDevice{}

func (n nvmlDevice) Name() string { return n.name }

func (n nvmlDevice) EnergyMJ() (uint64, error) {
	e, ret := n.d.GetTotalEnergyConsumption()
	if ret == nvml.ERROR_NOT_SUPPORTED {
		return 0, fmt.Errorf("%w: total energy not supported before Volta", ErrNoData)
	}
	if ret != nvml.SUCCESS {
		return 0, errors.New(nvml.ErrorString(ret))
	}
	return e, nil
}

func (n nvmlDevice) PowerLimitW() (float64, error) {
	mw, ret := n.d.GetEnforcedPowerLimit()
	if ret != nvml.SUCCESS {
		return 0, errors.New(nvml.ErrorString(ret))
	}
	return float64(mw) / 1000, nil
}

func (n nvmlDevice) PowerW() (float64, error) {
	mw, ret := n.d.GetPowerUsage()
	if ret != nvml.SUCCESS {
		return 0, errors.New(nvml.ErrorString(ret))
	}
	return float64(mw) / 1000, nil
}

// InstantPowerW reads the NVML_FI_DEV_POWER_INSTANT field (mW): unlike nvmlDeviceGetPowerUsage,
// a one-second average on recent boards, it follows the load within a counter period.
func (n nvmlDevice) InstantPowerW() (float64, error) {
	v := []nvml.FieldValue{{FieldId: nvml.FI_DEV_POWER_INSTANT}}
	if ret := n.d.GetFieldValues(v); ret != nvml.SUCCESS {
		return 0, errors.New(nvml.ErrorString(ret))
	}
	if r := nvml.Return(v[0].NvmlReturn); r != nvml.SUCCESS {
		return 0, errors.New(nvml.ErrorString(r))
	}
	mw, err := fieldValue(v[0])
	return mw / 1000, err
}

// fieldValue decodes an NVML field value by its type.
func fieldValue(v nvml.FieldValue) (float64, error) {
	b := v.Value[:]
	switch nvml.ValueType(v.ValueType) {
	case nvml.VALUE_TYPE_DOUBLE:
		return math.Float64frombits(binary.LittleEndian.Uint64(b)), nil
	case nvml.VALUE_TYPE_UNSIGNED_INT:
		return float64(binary.LittleEndian.Uint32(b)), nil
	case nvml.VALUE_TYPE_SIGNED_INT:
		return float64(int32(binary.LittleEndian.Uint32(b))), nil
	case nvml.VALUE_TYPE_UNSIGNED_LONG, nvml.VALUE_TYPE_UNSIGNED_LONG_LONG:
		return float64(binary.LittleEndian.Uint64(b)), nil
	case nvml.VALUE_TYPE_SIGNED_LONG_LONG:
		return float64(int64(binary.LittleEndian.Uint64(b))), nil
	}
	return 0, fmt.Errorf("nvml: field value of type %d", v.ValueType)
}

func (n nvmlDevice) PIDs(dst []uint32) ([]uint32, error) {
	ps, ret := n.d.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		return dst, errors.New(nvml.ErrorString(ret))
	}
	for _, p := range ps {
		dst = append(dst, p.Pid)
	}
	if gs, ret := n.d.GetGraphicsRunningProcesses(); ret == nvml.SUCCESS {
		for _, p := range gs {
			dst = append(dst, p.Pid)
		}
	}
	return dst, nil
}

func (n nvmlDevice) Utilization(since uint64) ([]procUtil, error) {
	ss, ret := n.d.GetProcessUtilization(since)
	if ret == nvml.ERROR_NOT_FOUND {
		return nil, nil // no sample newer than since
	}
	if ret != nvml.SUCCESS {
		return nil, errors.New(nvml.ErrorString(ret))
	}
	out := make([]procUtil, 0, len(ss))
	for _, s := range ss {
		if s.TimeStamp >= since {
			out = append(out, procUtil{PID: s.Pid, TimeStamp: s.TimeStamp, SM: s.SmUtil})
		}
	}
	return out, nil
}
