package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"

	"github.com/eoc-proxy/eoc-proxy/meter"
)

func init() { register("meter", runMeter) }

// runMeter is `eoc-proxy meter [-config F] [-json]`: it detects the energy counters as serve
// would, probes each for liveness under a CPU load it makes itself, measures each counter's read
// cost and the host's current power, and shows the process tree found for each local backend.
func runMeter(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("meter", flag.ContinueOnError)
	path := configFlag(fs)
	asJSON := fs.Bool("json", false, `print one JSON object {"counters":[...],"backends":[...]}`)
	window := fs.Duration("window", 500*time.Millisecond, "how long to measure the host's current power")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		return err
	}
	log := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).Level(zerolog.WarnLevel)
	o := meterOptions(cfg, log)
	o.SkipProbe = true // Status probes every counter itself and reports what it found
	m, err := meter.New(o)
	if err != nil {
		return err
	}
	defer m.Close()
	rep := m.Status(context.Background(), *window)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return printMeterReport(stdout, rep)
}

func printMeterReport(w io.Writer, rep meter.Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "COUNTER\tLIVE\tREAD COST\tPOWER\tDETAIL")
	for _, c := range rep.Counters {
		live := "yes"
		if !c.Live {
			live = "no: " + c.Reason
		}
		cost, power := "-", "-"
		if c.ReadCostUS > 0 {
			cost = fmt.Sprintf("%.1f µs", c.ReadCostUS)
		}
		if c.Watts != nil {
			power = fmt.Sprintf("%.1f W", *c.Watts)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Name, live, cost, power, c.Detail)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, b := range rep.Backends {
		fmt.Fprintf(w, "backend %s  %s  %s", b.Name, b.URL, b.Source)
		if b.Reason != "" {
			fmt.Fprintf(w, "  (%s", b.Reason)
			if b.Detail != "" {
				fmt.Fprintf(w, ": %s", b.Detail)
			}
			fmt.Fprint(w, ")")
		}
		fmt.Fprintln(w)
		depth := map[int]int{}
		for _, p := range b.Processes {
			d, ok := depth[p.PPID]
			if ok {
				d++
			}
			depth[p.PID] = d
			gpu := ""
			if p.GPU {
				gpu = "  gpu"
			}
			fmt.Fprintf(w, "  %s%d %s  cpu %.2fs%s\n", strings.Repeat("  ", d), p.PID, p.Comm, p.CPUSeconds, gpu)
		}
	}
	return nil
}
