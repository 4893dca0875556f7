package meter

import "testing"

func TestSeamEstimates(t *testing.T) {
	m, err := New(Options{Backends: []BackendInfo{
		{Name: "local", URL: "http://127.0.0.1:11434"},
		{Name: "openai", URL: "https://api.openai.com/v1"},
	}, TokenModels: []TokenModel{{Patterns: []string{"gpt-4o*"}, JPerPrompt: 0.01, JPerCompletion: 0.3}}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	f := m.Begin("openai").End(Work{Model: "gpt-4o-mini", PromptTokens: 100, CompletionTokens: 10})
	if f.Grade != GradeEstimated || f.Method != MethodTokenModel || f.Reason != ReasonRemoteBackend || f.Joules != 4 {
		t.Fatalf("remote figure = %+v", f)
	}
	var nilm *Meter
	if f := nilm.Begin("x").End(Work{CompletionTokens: 1}); f.Joules != DefaultRemoteJPerCompletion {
		t.Fatalf("nil meter figure = %+v", f)
	}
}
