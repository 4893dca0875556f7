// Package tinymodel writes a deterministic tiny llama-architecture GGUF model and imports it into Ollama.
//
// The model has 2 layers of width 64, a GPT-2 style byte-level BPE vocabulary
// (256 byte tokens, a few merges, bos and eos) and random weights drawn from a
// fixed seed, so every build writes the same bytes. It is meant for tests: it
// loads in well under a second and decodes hundreds of tokens per second on a
// CPU. Its output is random text, shaped to be readable: the weights reserve
// residual dimension 0 as a constant, which the output layer uses as a
// per-token bias that keeps sampling to printable ASCII (mostly lowercase
// letters and spaces) and never samples eos. Generation therefore always runs
// to its token limit; the Ollama model sets num_predict to DefaultNumPredict
// so a request without max_tokens stays short. Pass stop sequences (e.g. " ")
// to get a finish_reason of "stop".
package tinymodel

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/ollama/ollama/api"
	"github.com/ollama/ollama/fs/ggml"
)

// Model names created in Ollama.
const (
	// ChatName is the completion model.
	ChatName = "eoc-tiny"
	// EmbedName is the same network marked as an embedding model (mean pooling).
	EmbedName = "eoc-tiny-embed"
)

// Shape of the network.
const (
	Layers               = 2
	Width                = 64
	FFNWidth             = 128
	Heads                = 4
	HeadsKV              = 4
	ContextLength        = 4096
	NumMerges            = len(merges)
	VocabSize            = 256 + NumMerges + 2
	BOS                  = 256 + NumMerges
	EOS                  = BOS + 1
	Seed          uint64 = 0x0e0c_7e57_0000_0001
)

// DefaultNumPredict is the num_predict parameter given to the Ollama models:
// the tokens a request without max_tokens generates.
const DefaultNumPredict = 32

// Template is the Ollama prompt template: one "role: content" line per
// message, then "assistant:".
const Template = `{{- range .Messages }}{{ .Role }}: {{ .Content }}
{{ end }}assistant:`

// merges are the BPE merges, in rank order, written with GPT-2's byte to
// unicode mapping (Ġ is the space byte).
var merges = [...]string{
	"Ġ t", "h e", "i n", "e r", "a n", "Ġ a", "o n", "Ġt he",
}

// Spec describes one model to create in Ollama.
type Spec struct {
	Name      string
	Embedding bool // write pooling_type=mean: Ollama lists the model as embedding-only
}

// Chat and Embed are the two models Create makes.
var (
	Chat  = Spec{Name: ChatName}
	Embed = Spec{Name: EmbedName, Embedding: true}
)

// byteToUnicode is GPT-2's bytes_to_unicode: printable bytes map to
// themselves, the rest to code points from 256 up.
func byteToUnicode() [256]rune {
	var m [256]rune
	printable := func(b int) bool {
		return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
	}
	n := 0
	for b := range 256 {
		if printable(b) {
			m[b] = rune(b)
		} else {
			m[b] = rune(256 + n)
			n++
		}
	}
	return m
}

// Tokens returns the vocabulary: token id i < 256 is byte i.
func Tokens() []string {
	bu := byteToUnicode()
	toks := make([]string, 0, VocabSize)
	for b := range 256 {
		toks = append(toks, string(bu[b]))
	}
	for _, m := range merges {
		var a, b string
		if _, err := fmt.Sscanf(m, "%s %s", &a, &b); err != nil {
			panic(err)
		}
		toks = append(toks, a+b)
	}
	toks = append(toks, "<|bos|>", "<|eos|>")
	return toks
}

// Merges returns the BPE merges.
func Merges() []string { return append([]string(nil), merges[:]...) }

// KV returns the GGUF metadata.
func KV(embedding bool) ggml.KV {
	toks := Tokens()
	types := make([]int32, len(toks))
	scores := make([]float32, len(toks))
	for i := range types {
		types[i] = 1 // normal
	}
	types[BOS], types[EOS] = 3, 3 // control
	kv := ggml.KV{
		"general.architecture":         "llama",
		"general.name":                 ChatName,
		"general.file_type":            uint32(0), // all F32
		"general.alignment":            uint32(32),
		"general.quantization_version": uint32(2),

		"llama.context_length":                   uint32(ContextLength),
		"llama.embedding_length":                 uint32(Width),
		"llama.block_count":                      uint32(Layers),
		"llama.feed_forward_length":              uint32(FFNWidth),
		"llama.attention.head_count":             uint32(Heads),
		"llama.attention.head_count_kv":          uint32(HeadsKV),
		"llama.attention.layer_norm_rms_epsilon": float32(1e-5),
		"llama.rope.dimension_count":             uint32(Width / Heads),
		"llama.rope.freq_base":                   float32(10000),
		"llama.vocab_size":                       uint32(VocabSize),

		"tokenizer.ggml.model":         "gpt2",
		"tokenizer.ggml.pre":           "default",
		"tokenizer.ggml.tokens":        toks,
		"tokenizer.ggml.token_type":    types,
		"tokenizer.ggml.scores":        scores,
		"tokenizer.ggml.merges":        Merges(),
		"tokenizer.ggml.bos_token_id":  uint32(BOS),
		"tokenizer.ggml.eos_token_id":  uint32(EOS),
		"tokenizer.ggml.add_bos_token": true,
		"tokenizer.ggml.add_eos_token": false,
	}
	if embedding {
		kv["general.name"] = EmbedName
		kv["llama.pooling_type"] = uint32(1) // mean
	}
	return kv
}

// rng is splitmix64: small, fixed forever, so the weights never change with
// the Go version.
type rng struct{ s uint64 }

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// uniform returns a value in [-a, a). Each step is exact or a single
// rounding, so the result is the same on every platform.
func (r *rng) uniform(a float64) float32 {
	u := float64(r.next()>>11) * 0x1p-53 // [0, 1), exact
	v := 2*u - 1                         // exact
	return float32(v * a)
}

// f32 is a tensor's data, written little-endian.
type f32 []float32

func (d f32) WriteTo(w io.Writer) (int64, error) {
	buf := make([]byte, 4*len(d))
	for i, v := range d {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
	}
	n, err := w.Write(buf)
	return int64(n), err
}

// matrix returns an in×out matrix (ggml shape [in, out]: element (i, o) is
// at o*in+i) with entries uniform in [-a, a).
func matrix(r *rng, in, out int, a float64) f32 {
	d := make(f32, in*out)
	for i := range d {
		d[i] = r.uniform(a)
	}
	return d
}

func ones(n int) f32 {
	d := make(f32, n)
	for i := range d {
		d[i] = 1
	}
	return d
}

// zeroInput clears input column 0 (the constant dimension) of an [in, out] matrix.
func zeroInput(d f32, in, out int) {
	for o := range out {
		d[o*in] = 0
	}
}

// zeroOutput clears output row 0 of an [in, out] matrix, so the layer never
// writes the constant dimension.
func zeroOutput(d f32, in int) {
	clear(d[:in])
}

// Bias is the logit offset the output layer gives token id t (roughly in
// logits: the constant dimension is about 1 after the final norm).
func Bias(t int) float32 {
	const forbidden = -40
	switch {
	case t == ' ':
		return 2.5
	case t >= 'a' && t <= 'z':
		return 1
	case t > ' ' && t < 0x7f:
		return -1.5
	case t >= 256 && t < 256+NumMerges:
		return 1
	default: // control bytes, bytes >= 0x7f, bos, eos
		return forbidden
	}
}

// Tensors returns the model's tensors, drawn from Seed.
func Tensors() []*ggml.Tensor {
	r := &rng{s: Seed}
	var ts []*ggml.Tensor
	add := func(name string, d f32, shape ...uint64) {
		ts = append(ts, &ggml.Tensor{Name: name, Kind: 0, Shape: shape, WriterTo: d})
	}
	const (
		w  = Width
		fw = FFNWidth
		kv = Width / Heads * HeadsKV
	)

	emb := matrix(r, w, VocabSize, 0.15)
	for t := range VocabSize {
		emb[t*w] = 1 // the constant dimension
	}
	add("token_embd.weight", emb, w, uint64(VocabSize))

	for l := range Layers {
		p := fmt.Sprintf("blk.%d.", l)
		add(p+"attn_norm.weight", ones(w), w)
		for _, n := range []string{"attn_q", "attn_k", "attn_v"} {
			out := w
			if n != "attn_q" {
				out = kv
			}
			m := matrix(r, w, out, 1/8.)
			zeroInput(m, w, out)
			add(p+n+".weight", m, w, uint64(out))
		}
		o := matrix(r, w, w, 0.5/8)
		zeroOutput(o, w)
		add(p+"attn_output.weight", o, w, w)
		add(p+"ffn_norm.weight", ones(w), w)
		for _, n := range []string{"ffn_gate", "ffn_up"} {
			m := matrix(r, w, fw, 1/8.)
			zeroInput(m, w, fw)
			add(p+n+".weight", m, w, fw)
		}
		down := matrix(r, fw, w, 0.5/11.3)
		zeroOutput(down, fw)
		add(p+"ffn_down.weight", down, fw, w)
	}

	norm := ones(w)
	norm[0] = 1. / 8 // the constant dimension comes out of the norm at ~8
	add("output_norm.weight", norm, w)
	out := matrix(r, w, VocabSize, 0.6)
	for t := range VocabSize {
		out[t*w] = Bias(t)
	}
	add("output.weight", out, w, uint64(VocabSize))
	return ts
}

// WriteFile writes the GGUF to path.
func WriteFile(path string, embedding bool) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	return ggml.WriteGGUF(f, KV(embedding), Tensors())
}

// GGUF returns the model file's bytes.
func GGUF(embedding bool) ([]byte, error) {
	dir, err := os.MkdirTemp("", "tinymodel")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir) //nolint:errcheck // a temp dir left behind is harmless
	p := filepath.Join(dir, "model.gguf")
	if err := WriteFile(p, embedding); err != nil {
		return nil, err
	}
	return os.ReadFile(p)
}

// Digest returns the "sha256:<hex>" name Ollama gives a blob.
func Digest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// Create writes the model for spec and creates it in the Ollama that c talks
// to (CreateBlob, then Create with Files and Template). It is idempotent.
func Create(ctx context.Context, c *api.Client, spec Spec) error {
	b, err := GGUF(spec.Embedding)
	if err != nil {
		return fmt.Errorf("tinymodel: write %s: %w", spec.Name, err)
	}
	digest := Digest(b)
	if err := c.CreateBlob(ctx, digest, bytes.NewReader(b)); err != nil {
		return fmt.Errorf("tinymodel: upload blob for %s: %w", spec.Name, err)
	}
	stream := false
	req := &api.CreateRequest{
		Model:  spec.Name,
		Files:  map[string]string{spec.Name + ".gguf": digest},
		Stream: &stream,
	}
	// One thread: on a 2-core machine llama.cpp's thread barrier costs more
	// than this model's matrix work.
	req.Parameters = map[string]any{"num_thread": 1}
	if !spec.Embedding {
		req.Template = Template
		req.Parameters["num_predict"] = DefaultNumPredict
	}
	var last string
	if err := c.Create(ctx, req, func(p api.ProgressResponse) error {
		last = p.Status
		return nil
	}); err != nil {
		return fmt.Errorf("tinymodel: create %s: %w", spec.Name, err)
	}
	if last != "success" {
		return fmt.Errorf("tinymodel: create %s: ended with status %q", spec.Name, last)
	}
	return nil
}

// CreateAll creates Chat and Embed.
func CreateAll(ctx context.Context, c *api.Client) error {
	for _, s := range []Spec{Chat, Embed} {
		if err := Create(ctx, c, s); err != nil {
			return err
		}
	}
	return nil
}

// WaitReady polls the server until it answers or ctx ends.
func WaitReady(ctx context.Context, c *api.Client) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := c.Heartbeat(hctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-t.C:
		}
	}
}
