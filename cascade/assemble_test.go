package cascade

import (
	"strings"
	"testing"
)

// An upstream names indexes; the assembler must not grow to whatever it names, nor panic on a
// negative one.
func TestAssemblerBoundsIndexes(t *testing.T) {
	text := "x"
	neg, big, ok := -1, MaxToolCalls, 3
	cases := []struct {
		name    string
		choices int
		chunk   Chunk
		wantErr string
	}{
		{"choice beyond default n", 0, Chunk{Choices: []ChunkChoice{{Index: 1, Delta: Delta{Content: &text}}}}, "choice index 1"},
		{"huge choice", 4, Chunk{Choices: []ChunkChoice{{Index: 50_000_000, Delta: Delta{Content: &text}}}}, "choice index 50000000"},
		{"negative choice", 0, Chunk{Choices: []ChunkChoice{{Index: -1}}}, "choice index -1"},
		{"negative tool call", 0, Chunk{Choices: []ChunkChoice{{Delta: Delta{ToolCalls: []ToolCall{{Index: &neg}}}}}}, "tool call index -1"},
		{"tool call at cap", 0, Chunk{Choices: []ChunkChoice{{Delta: Delta{ToolCalls: []ToolCall{{Index: &big}}}}}}, "tool call index 128"},
		{"too many positional tool calls", 0, Chunk{Choices: []ChunkChoice{{Delta: Delta{ToolCalls: make([]ToolCall, MaxToolCalls+1)}}}}, "129 tool calls"},
		{"within n", 4, Chunk{Choices: []ChunkChoice{{Index: 3, Delta: Delta{Content: &text, ToolCalls: []ToolCall{{Index: &ok}}}}}}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := Assembler{Choices: tc.choices}
			a.Add(&tc.chunk)
			err := a.Err()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Err = %v", err)
				}
				if got := a.Answer(); len(got.Choices) != 4 || len(got.Choices[3].Message.ToolCalls) != 4 {
					t.Fatalf("answer %+v", got)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Err = %v, want %q", err, tc.wantErr)
			}
			if got := a.Answer(); len(got.Choices) != 0 {
				t.Fatalf("a refused chunk grew the answer: %d choices", len(got.Choices))
			}
			// The error sticks: later good chunks are dropped too.
			a.Add(&Chunk{Choices: []ChunkChoice{{Delta: Delta{Content: &text}}}})
			if a.Err() == nil || len(a.Answer().Choices) != 0 {
				t.Fatal("the assembler went on after an error")
			}
		})
	}
}

// A recording bounded by MaxBytes keeps no text past it: the answer comes back Oversize, with
// its finish reason and usage but none of the text, and the assembler holds no more than the
// bound however long the stream goes on.
func TestAssemblerMaxBytes(t *testing.T) {
	a := Assembler{MaxBytes: 1000}
	piece := strings.Repeat("z", 100)
	for range 50 {
		a.Add(&Chunk{ID: "c", Choices: []ChunkChoice{{Delta: Delta{Content: &piece}}}})
	}
	if n := a.choices[0].content.Len(); n != 0 {
		t.Fatalf("the assembler still holds %d bytes of text past its bound", n)
	}
	stop := "stop"
	a.Add(&Chunk{ID: "c", Choices: []ChunkChoice{{FinishReason: &stop}}, Usage: &Usage{CompletionTokens: 7}})
	ans := a.Answer()
	if !ans.Oversize || !ans.Complete || ans.Choices[0].FinishReason != "stop" || ans.Usage.CompletionTokens != 7 || ans.Text() != "" {
		t.Fatalf("answer %+v", ans)
	}

	b := Assembler{MaxBytes: 1000}
	b.Add(&Chunk{ID: "c", Choices: []ChunkChoice{{Delta: Delta{Content: &piece}, FinishReason: &stop}}})
	if ans := b.Answer(); ans.Oversize || ans.Text() != piece {
		t.Fatalf("an answer within the bound: %+v", ans)
	}
}

type bounded struct {
	fixedStage
	max int
}

func (bounded) Learn(*Request, *Answer) {}
func (b bounded) MaxEntryBytes() int    { return b.max }

type learnsAll struct{ fixedStage }

func (learnsAll) Learn(*Request, *Answer) {}

// A stream is recorded as far as the learner with the largest bound stores; all of it when a
// learner has no bound; next to nothing when no stage learns.
func TestRecordBound(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stages []Stage
		want   int
	}{
		{"no learner", []Stage{fixedStage{}}, 1},
		{"largest bound", []Stage{bounded{max: 10}, bounded{max: 30}, fixedStage{}}, 30},
		{"one unbounded", []Stage{bounded{max: 10}, learnsAll{}, fixedStage{}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := recordBound(tc.stages); got != tc.want {
				t.Fatalf("recordBound = %d, want %d", got, tc.want)
			}
		})
	}
}
