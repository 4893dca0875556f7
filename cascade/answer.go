package cascade

import (
	"github.com/eoc-proxy/eoc-proxy/energy"

	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"time"
	"unicode/utf8"
)

// NewID returns a fresh completion id in OpenAI's form. Its 96 random bits come from
// math/rand/v2's generator (ChaCha8, randomly seeded, per thread): an id names an answer and
// guards nothing, so it needs no read of the system's generator.
func NewID() string {
	const prefix = "chatcmpl-"
	var b [12]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint32(b[8:], rand.Uint32())
	var id [len(prefix) + 2*len(b)]byte // built here: one allocation, the string
	copy(id[:], prefix)
	hex.Encode(id[len(prefix):], b[:])
	return string(id[:])
}

// TextAnswer is a whole, complete answer made by an in-process stage: one assistant choice with
// text, finish reason stop, and usage estimated at four characters a token where not known
// (completionTokens <= 0). saved is what the stage reports as saved.
func TextAnswer(req *Request, text string, completionTokens int, saved float64) *Answer {
	prompt := 0
	for i := range req.Chat.Messages {
		prompt += EstimateTokens(req.Chat.Messages[i].Text())
	}
	if completionTokens <= 0 {
		completionTokens = EstimateTokens(text)
	}
	return &Answer{
		ID:      NewID(),
		Model:   req.Chat.Model,
		Created: time.Now().Unix(),
		Choices: []Choice{{
			Message:      AnswerMessage{Role: "assistant", Content: &text},
			FinishReason: "stop",
		}},
		Usage:    &Usage{PromptTokens: prompt, CompletionTokens: completionTokens, TotalTokens: prompt + completionTokens},
		Energy:   energy.Figure{Saved: saved},
		Complete: true,
	}
}

// EstimateTokens is the usual four characters a token.
func EstimateTokens(s string) int { return (utf8.RuneCountInString(s) + 3) / 4 }
