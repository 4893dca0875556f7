package energy

import (
	"encoding/json"
	"testing"
	"time"
)

func TestPlus(t *testing.T) {
	cpu := Figure{Joules: 1.5, Grade: Measured, Coverage: CoverageWhole, Method: "rapl", CPUJoules: 1.5}
	est := Figure{Joules: 0.25, Grade: Estimated, Coverage: CoverageWhole, Method: "stage-model", Reason: "in-process-stage", Saved: 9}
	part := Figure{Joules: 2, Grade: Measured, Coverage: CoveragePartial, Method: "rapl", Reason: "gpu-shared"}
	cases := []struct {
		name string
		a, b Figure
		want Figure
	}{
		{"zero adds nothing", cpu, Figure{}, cpu},
		{"to zero", Figure{}, est, est},
		{"measured plus estimated is estimated", cpu, est, Figure{Joules: 1.75, Saved: 9, Grade: Estimated, Coverage: CoverageWhole,
			Method: "rapl+stage-model", Reason: "in-process-stage", CPUJoules: 1.5}},
		{"measured plus measured stays measured", cpu, cpu, Figure{Joules: 3, Grade: Measured, Coverage: CoverageWhole, Method: "rapl", CPUJoules: 3}},
		{"partial wins", cpu, part, Figure{Joules: 3.5, Grade: Measured, Coverage: CoveragePartial, Method: "rapl", Reason: "gpu-shared", CPUJoules: 1.5}},
		{"reasons joined once", part.Plus(est), part, Figure{Joules: 4.25, Saved: 9, Grade: Estimated, Coverage: CoveragePartial,
			Method: "rapl+stage-model", Reason: "gpu-shared;in-process-stage"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.a.Plus(c.b); got != c.want {
				t.Errorf("Plus:\n got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestRounded(t *testing.T) {
	f := Figure{Joules: 0.1 + 0.2, Saved: 1.0000000004}.Rounded()
	if f.Joules != 0.3 || f.Saved != 1 {
		t.Errorf("Rounded = %v, %v; want 0.3, 1", f.Joules, f.Saved)
	}
}

func TestReceiptHash(t *testing.T) {
	at := time.Date(2026, 12, 2, 18, 0, 0, 5, time.UTC)
	r := Receipt{Key: "k", Stage: "neural", Model: "m", Joules: 0.3, Grade: Measured, Time: at}
	h := r.Hash()
	if len(h) != 64 {
		t.Fatalf("hash %q is not hex SHA-256", h)
	}
	if r.Hash() != h {
		t.Error("hash is not deterministic")
	}
	for _, edit := range []func(*Receipt){
		func(r *Receipt) { r.Joules = 0.30000001 },
		func(r *Receipt) { r.Grade = Estimated },
		func(r *Receipt) { r.Time = r.Time.Add(time.Nanosecond) },
		func(r *Receipt) { r.Model = "m2" },
	} {
		e := r
		edit(&e)
		if e.Hash() == h {
			t.Errorf("edited receipt %+v hashes the same", e)
		}
	}
	if (Receipt{Key: "k", Stage: "neural", Model: "m", Joules: 0.3, Grade: Measured, Time: at.In(time.FixedZone("x", 3600))}).Hash() != h {
		t.Error("the same instant in another zone hashes differently")
	}
}

// TestViewJSON: the view every JSON body embeds carries the headers' names, with the figure's
// values.
func TestViewJSON(t *testing.T) {
	f := Figure{Joules: 2, Low: 1, High: 3, Grade: Measured, Coverage: CoverageWhole, Method: "rapl", Reason: "why"}
	b, err := json.Marshal(f.View())
	if err != nil {
		t.Fatal(err)
	}
	want := `{"joules":2,"joules_low":1,"joules_high":3,"grade":"measured","coverage":"whole","method":"rapl","reason":"why"}`
	if string(b) != want {
		t.Fatalf("%s\nwant %s", b, want)
	}
}
