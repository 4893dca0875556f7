package main

import (
	"testing"

	"github.com/rs/zerolog"

	"github.com/eoc-proxy/eoc-proxy/config"
)

// TestMeterOptionsSettleInline: meter.nvml.settle_inline reaches the meter, off unless set.
func TestMeterOptionsSettleInline(t *testing.T) {
	for _, inline := range []bool{false, true} {
		var cfg config.Config
		cfg.Meter.NVML.SettleInline = inline
		if got := meterOptions(&cfg, zerolog.Nop()).SettleInline; got != inline {
			t.Errorf("settle_inline %v: meter.Options.SettleInline = %v", inline, got)
		}
	}
}
