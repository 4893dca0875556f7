package ledger

import (
	"fmt"
	"sort"
)

// Total is what a group of records cost.
type Total struct {
	Records     int     `json:"records"`
	Joules      float64 `json:"joules"`
	JoulesSaved float64 `json:"joules_saved"`
}

func (t *Total) add(r *Record) {
	t.Records++
	t.Joules += r.Joules
	t.JoulesSaved += r.Saved
}

// counted is a provisional call's record as Sum counted it, until its settlement replaces its
// figure.
type counted struct {
	keyID, model, stage, day string
	joules, saved            float64
}

// Totals sum joules and joules saved over records, in all and grouped. Days are UTC dates
// ("2006-01-02"); the key id of calls made without auth is "".
type Totals struct {
	Total
	ByKeyID map[string]Total `json:"by_key_id"`
	ByModel map[string]Total `json:"by_model"`
	ByStage map[string]Total `json:"by_stage"`
	ByDay   map[string]Total `json:"by_day"`
	// Torn counts torn last lines skipped (crashes mid-write not yet recovered).
	Torn int `json:"torn,omitempty"`
}

// Sum totals the records of the files. It reads records; it does not verify them (run Verify
// for that). Files set aside by recovery ("….torn") are skipped, and so is a torn last line.
// A line that is not a record is an error that names it.
//
// Each call counts once, with its settled figure: a settlement record replaces the provisional
// figure of the call it settles, in the call's groups (its day included), and is not counted as
// a record of its own; one whose call is not in the files counts as that call. A provisional
// call never settled counts with its provisional figure. A second settlement of one call counts
// nothing (Verify rejects it).
func Sum(files ...string) (Totals, error) {
	t := Totals{ByKeyID: map[string]Total{}, ByModel: map[string]Total{}, ByStage: map[string]Total{}, ByDay: map[string]Total{}}
	provisional := map[string]counted{} // by receipt
	settled := map[string]bool{}        // the receipts settlements named: a repeat counts nothing
	chain, _ := Order(files)
	for _, name := range chain {
		err := scanFile(name, func(line []byte, n int, _ int64, whole bool) error {
			if !whole {
				t.Torn++
				return nil
			}
			r, err := decodeLine(line)
			if err != nil {
				return fmt.Errorf("ledger: %s:%d: not a record: %w", name, n, err)
			}
			day := r.Time.UTC().Format("2006-01-02")
			if r.Settles != "" {
				if settled[r.Settles] {
					return nil
				}
				settled[r.Settles] = true
			}
			if c, ok := provisional[r.Settles]; ok && r.Settles != "" {
				delete(provisional, r.Settles)
				t.settle(c, r.Joules, r.Saved)
				return nil
			}
			if r.Provisional && r.Settles == "" {
				provisional[r.Receipt] = counted{keyID: r.KeyID, model: r.Model, stage: r.Stage, day: day, joules: r.Joules, saved: r.Saved}
			}
			t.add(&r)
			for _, g := range []struct {
				m map[string]Total
				k string
			}{{t.ByKeyID, r.KeyID}, {t.ByModel, r.Model}, {t.ByStage, r.Stage}, {t.ByDay, day}} {
				v := g.m[g.k]
				v.add(&r)
				g.m[g.k] = v
			}
			return nil
		})
		if err != nil {
			return t, err
		}
	}
	return t, nil
}

// settle replaces call c's provisional joules and saved joules by its settled ones, in the total
// and in c's groups.
func (t *Totals) settle(c counted, joules, saved float64) {
	dj, ds := joules-c.joules, saved-c.saved
	t.Joules += dj
	t.JoulesSaved += ds
	for _, g := range []struct {
		m map[string]Total
		k string
	}{{t.ByKeyID, c.keyID}, {t.ByModel, c.model}, {t.ByStage, c.stage}, {t.ByDay, c.day}} {
		v := g.m[g.k]
		v.Joules += dj
		v.JoulesSaved += ds
		g.m[g.k] = v
	}
}

// Row is one group of a grouping.
type Row struct {
	Name string `json:"name"`
	Total
}

// Group returns the rows of one grouping ("key" for key ids, "model", "stage" or "day"),
// sorted by name.
func (t *Totals) Group(by string) ([]Row, error) {
	var m map[string]Total
	switch by {
	case "key", "key_id":
		m = t.ByKeyID
	case "model":
		m = t.ByModel
	case "stage":
		m = t.ByStage
	case "day":
		m = t.ByDay
	default:
		return nil, fmt.Errorf("ledger: cannot group by %q: one of key, model, stage, day", by)
	}
	rows := make([]Row, 0, len(m))
	for k, v := range m {
		rows = append(rows, Row{Name: k, Total: v})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
	return rows, nil
}
