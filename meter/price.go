package meter

import "path"

// Default estimate parameters.
const (
	// DefaultCPUWattsPerCore prices one fully busy core: a typical desktop or server part's TDP
	// divided by its cores (125 W / 12 cores ≈ 10 W; 280 W / 32 cores ≈ 9 W).
	DefaultCPUWattsPerCore = 10.0
	// DefaultGPUWatts prices a fully busy GPU in the GPU power model: an RTX 4090 or an A100
	// PCIe draws about 300 W while serving.
	DefaultGPUWatts = 300.0
	// DefaultRemoteJPerCompletion is the upper end of ML.ENERGY's 0.12–0.4 J per output token
	// for batched H100/B200 serving (ml.energy leaderboard). Its v3 gives Llama-3.1-8B on one
	// H100 0.455 J/token at 8 concurrent sequences down to 0.070 at 512 (the token model's
	// range, tokenModelLow/High). GPU energy only, as the source measures it: the host's CPU
	// and memory are not in it.
	DefaultRemoteJPerCompletion = 0.4
	// DefaultLocalJPerCompletion is ML.ENERGY's figure (leaderboard v1) for Llama-2-7B at batch
	// size 1 on an A100, about 4.35 J per output token: what an unbatched local server spends.
	// GPU energy only, as the source measures it.
	DefaultLocalJPerCompletion = 4.35
	// DefaultPromptRatio prices a prompt token at a tenth of an output token, since prefill
	// runs a prompt's tokens in parallel. The ratio is our assumption, not a published figure.
	DefaultPromptRatio = 0.1
)

// TokenModel prices the tokens of models whose names match one of Patterns (path.Match globs).
// The first matching model wins. The zero value matches nothing.
type TokenModel struct {
	Patterns       []string
	JPerPrompt     float64
	JPerCompletion float64
}

// priceTokens returns J per prompt and per completion token: the first TokenModel whose pattern
// matches the model, else the backend's JoulesPerToken, else the local or remote default.
func priceTokens(m *Meter, b *backendState, model string, local bool) (jp, jc float64) {
	if m != nil {
		for _, tm := range m.opts.TokenModels {
			for _, p := range tm.Patterns {
				if ok, _ := path.Match(p, model); ok {
					return tm.JPerPrompt, tm.JPerCompletion
				}
			}
		}
	}
	jc = DefaultRemoteJPerCompletion
	if local {
		jc = DefaultLocalJPerCompletion
	}
	if b != nil && b.info.JoulesPerToken > 0 {
		jc = b.info.JoulesPerToken
	}
	return jc * DefaultPromptRatio, jc
}
