package tinymodel

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/ollama/ollama/api"
	"github.com/ollama/ollama/fs/ggml"
)

// goldenDigest pins the chat model's bytes: a change to the weights, the
// metadata or Ollama's GGUF writer shows up here. Update it deliberately.
const goldenDigest = "sha256:6bfed82219e43940863648050a355ecda40d012f436f353f25d816826e193ccb"

func decodeFile(t *testing.T, embedding bool) (*ggml.GGML, string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "m.gguf")
	if err := WriteFile(p, embedding); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	g, err := ggml.Decode(f, -1)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	return g, p
}

func TestRoundTripMetadata(t *testing.T) {
	for _, embedding := range []bool{false, true} {
		g, _ := decodeFile(t, embedding)
		kv := g.KV()
		if got := kv.Architecture(); got != "llama" {
			t.Errorf("architecture = %q", got)
		}
		if got := kv.BlockCount(); got != Layers {
			t.Errorf("block_count = %d", got)
		}
		if got := kv.EmbeddingLength(); got != Width {
			t.Errorf("embedding_length = %d", got)
		}
		if got := kv.HeadCountMax(); got != Heads {
			t.Errorf("head_count = %d", got)
		}
		if got := kv.ContextLength(); got != ContextLength {
			t.Errorf("context_length = %d", got)
		}
		if got := kv.String("tokenizer.ggml.model"); got != "gpt2" {
			t.Errorf("tokenizer model = %q", got)
		}
		if got := kv.Strings("tokenizer.ggml.tokens"); !slices.Equal(got, Tokens()) {
			t.Errorf("tokens round-trip: got %d tokens", len(got))
		}
		if got := kv.Strings("tokenizer.ggml.merges"); !slices.Equal(got, Merges()) {
			t.Errorf("merges = %q", got)
		}
		if got := kv.Ints("tokenizer.ggml.token_type"); len(got) != VocabSize || got[BOS] != 3 || got[EOS] != 3 || got['a'] != 1 {
			t.Errorf("token_type = %v", got)
		}
		if b, e := kv.Uint("tokenizer.ggml.bos_token_id"), kv.Uint("tokenizer.ggml.eos_token_id"); int(b) != BOS || int(e) != EOS {
			t.Errorf("bos, eos = %d, %d", b, e)
		}
		_, pooled := kv["llama.pooling_type"]
		if pooled != embedding {
			t.Errorf("embedding=%v: pooling_type present = %v", embedding, pooled)
		}
	}
}

func TestRoundTripTensors(t *testing.T) {
	g, path := decodeFile(t, false)
	want := map[string]*ggml.Tensor{}
	for _, tt := range Tensors() {
		want[tt.Name] = tt
	}
	got := g.Tensors().Items()
	if len(got) != len(want) || len(got) != 2+1+Layers*9 {
		t.Fatalf("got %d tensors, want %d", len(got), len(want))
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range got {
		w, ok := want[tt.Name]
		if !ok {
			t.Errorf("unexpected tensor %q", tt.Name)
			continue
		}
		if !slices.Equal(tt.Shape, w.Shape) || tt.Kind != 0 {
			t.Errorf("%s: shape %v kind %d, want %v kind 0", tt.Name, tt.Shape, tt.Kind, w.Shape)
		}
		start := g.Tensors().Offset + tt.Offset
		end := start + tt.Size()
		if end > uint64(len(raw)) {
			t.Fatalf("%s: data [%d,%d) past end of file (%d)", tt.Name, start, end, len(raw))
		}
		var buf bytes.Buffer
		if _, err := w.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(raw[start:end], buf.Bytes()) {
			t.Errorf("%s: data differs after round-trip", tt.Name)
		}
	}
	// ~470 KB: 2 layers of width 64 in F32.
	if n := len(raw); n < 400<<10 || n > 520<<10 {
		t.Errorf("file is %d bytes", n)
	}
}

func TestDeterministic(t *testing.T) {
	a, err := GGUF(false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := GGUF(false)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("two writes differ")
	}
	e, err := GGUF(true)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a, e) {
		t.Fatal("embedding model has the same bytes as the chat model")
	}
	if got := Digest(a); got != goldenDigest {
		t.Errorf("digest = %s, want %s", got, goldenDigest)
	}
}

func TestVocabulary(t *testing.T) {
	toks := Tokens()
	if len(toks) != VocabSize {
		t.Fatalf("%d tokens, want %d", len(toks), VocabSize)
	}
	seen := map[string]int{}
	for i, s := range toks {
		if j, dup := seen[s]; dup {
			t.Errorf("token %q at %d and %d", s, j, i)
		}
		seen[s] = i
		if i < 256 && utf8.RuneCountInString(s) != 1 {
			t.Errorf("byte token %d is %q", i, s)
		}
	}
	for b, want := range map[int]string{' ': "Ġ", '\n': "Ċ", 'a': "a", '!': "!", 0: "Ā", 0xff: "ÿ"} {
		if toks[b] != want {
			t.Errorf("byte %#x is %q, want %q", b, toks[b], want)
		}
	}
	for _, m := range merges {
		l, r, _ := strings.Cut(m, " ")
		if _, ok := seen[l]; !ok {
			t.Errorf("merge %q: %q not in vocab", m, l)
		}
		if _, ok := seen[r]; !ok {
			t.Errorf("merge %q: %q not in vocab", m, r)
		}
		if _, ok := seen[l+r]; !ok {
			t.Errorf("merge %q: result not in vocab", m)
		}
	}
	if toks[BOS] != "<|bos|>" || toks[EOS] != "<|eos|>" {
		t.Errorf("bos, eos = %q, %q", toks[BOS], toks[EOS])
	}
}

// forward is a float64 reference of llama's forward pass over toks; it
// returns the logits at every position.
func forward(t *testing.T, toks []int) [][]float64 {
	t.Helper()
	w := map[string]f32{}
	for _, tt := range Tensors() {
		w[tt.Name] = tt.WriterTo.(f32)
	}
	matvec := func(m f32, in, out int, x []float64) []float64 {
		y := make([]float64, out)
		for o := range out {
			var s float64
			for i := range in {
				s += float64(m[o*in+i]) * x[i]
			}
			y[o] = s
		}
		return y
	}
	rmsnorm := func(x []float64, g f32) []float64 {
		var ss float64
		for _, v := range x {
			ss += v * v
		}
		r := 1 / math.Sqrt(ss/float64(len(x))+1e-5)
		y := make([]float64, len(x))
		for i, v := range x {
			y[i] = v * r * float64(g[i])
		}
		return y
	}
	const hd = Width / Heads
	rope := func(v []float64, pos int) {
		for h := range Heads {
			for i := 0; i < hd; i += 2 {
				th := float64(pos) * math.Pow(10000, -float64(i)/hd)
				a, b := v[h*hd+i], v[h*hd+i+1]
				v[h*hd+i] = a*math.Cos(th) - b*math.Sin(th)
				v[h*hd+i+1] = a*math.Sin(th) + b*math.Cos(th)
			}
		}
	}
	n := len(toks)
	x := make([][]float64, n)
	for p, tok := range toks {
		x[p] = make([]float64, Width)
		for i := range Width {
			x[p][i] = float64(w["token_embd.weight"][tok*Width+i])
		}
	}
	for l := range Layers {
		pre := "blk." + string(rune('0'+l)) + "."
		q, k, v := make([][]float64, n), make([][]float64, n), make([][]float64, n)
		for p := range n {
			xn := rmsnorm(x[p], w[pre+"attn_norm.weight"])
			q[p] = matvec(w[pre+"attn_q.weight"], Width, Width, xn)
			k[p] = matvec(w[pre+"attn_k.weight"], Width, Width, xn)
			v[p] = matvec(w[pre+"attn_v.weight"], Width, Width, xn)
			rope(q[p], p)
			rope(k[p], p)
		}
		for p := range n {
			att := make([]float64, Width)
			for h := range Heads {
				sc := make([]float64, p+1)
				mx := math.Inf(-1)
				for j := 0; j <= p; j++ {
					var s float64
					for i := range hd {
						s += q[p][h*hd+i] * k[j][h*hd+i]
					}
					sc[j] = s / math.Sqrt(hd)
					mx = max(mx, sc[j])
				}
				var z float64
				for j := range sc {
					sc[j] = math.Exp(sc[j] - mx)
					z += sc[j]
				}
				for j := range sc {
					for i := range hd {
						att[h*hd+i] += sc[j] / z * v[j][h*hd+i]
					}
				}
			}
			o := matvec(w[pre+"attn_output.weight"], Width, Width, att)
			for i := range Width {
				x[p][i] += o[i]
			}
			xn := rmsnorm(x[p], w[pre+"ffn_norm.weight"])
			g := matvec(w[pre+"ffn_gate.weight"], Width, FFNWidth, xn)
			u := matvec(w[pre+"ffn_up.weight"], Width, FFNWidth, xn)
			for i := range g {
				g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
			}
			d := matvec(w[pre+"ffn_down.weight"], FFNWidth, Width, g)
			for i := range Width {
				x[p][i] += d[i]
			}
		}
	}
	logits := make([][]float64, n)
	for p := range n {
		logits[p] = matvec(w["output.weight"], Width, VocabSize, rmsnorm(x[p], w["output_norm.weight"]))
	}
	return logits
}

// TestOutputIsPrintable checks the claim that the weights keep sampling to
// printable ASCII: at every position of random prompts, every forbidden
// token's logit is far below the best allowed one.
func TestOutputIsPrintable(t *testing.T) {
	r := &rng{s: 42}
	allowed := []int{}
	for tok := range VocabSize {
		if Bias(tok) > -10 {
			allowed = append(allowed, tok)
		}
	}
	if Bias(EOS) > -10 || Bias(BOS) > -10 || Bias('\n') > -10 || Bias(0x80) > -10 {
		t.Fatal("eos, bos, newline or a high byte is allowed")
	}
	var spreadSum float64
	var positions int
	for range 6 {
		toks := []int{BOS}
		for range 24 {
			toks = append(toks, allowed[r.next()%uint64(len(allowed))])
		}
		for p, lg := range forward(t, toks) {
			bestAllowed, bestForbidden := math.Inf(-1), math.Inf(-1)
			var mean, sq float64
			for _, tok := range allowed {
				bestAllowed = max(bestAllowed, lg[tok])
				mean += lg[tok]
			}
			mean /= float64(len(allowed))
			for _, tok := range allowed {
				sq += (lg[tok] - mean) * (lg[tok] - mean)
			}
			spreadSum += math.Sqrt(sq / float64(len(allowed)))
			positions++
			for tok := range VocabSize {
				if Bias(tok) <= -10 {
					bestForbidden = max(bestForbidden, lg[tok])
				}
			}
			if gap := bestAllowed - bestForbidden; gap < 20 {
				t.Errorf("position %d: forbidden logit only %.1f below the best allowed", p, gap)
			}
		}
	}
	// The allowed logits must differ enough that the text is not uniform noise,
	// and not so much that sampling is greedy.
	if s := spreadSum / float64(positions); s < 0.7 || s > 6 {
		t.Errorf("mean spread of allowed logits = %.2f", s)
	} else {
		t.Logf("mean spread of allowed logits = %.2f", s)
	}
}

// TestCreate checks the requests Create sends, against a fake Ollama.
func TestCreate(t *testing.T) {
	var mu sync.Mutex
	blobs := map[string][]byte{}
	var creates []api.CreateRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case r.Method == http.MethodHead && r.URL.Path == "/":
		case r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/api/blobs/"):
			b, _ := io.ReadAll(r.Body)
			d := strings.TrimPrefix(r.URL.Path, "/api/blobs/")
			s := sha256.Sum256(b)
			if d != "sha256:"+hex.EncodeToString(s[:]) {
				http.Error(w, `{"error":"digest mismatch"}`, http.StatusBadRequest)
				return
			}
			blobs[d] = b
			w.WriteHeader(http.StatusCreated)
		case r.Method == http.MethodPost && r.URL.Path == "/api/create":
			var req api.CreateRequest
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			for _, d := range req.Files {
				if _, ok := blobs[d]; !ok {
					w.WriteHeader(http.StatusBadRequest)
					_, _ = io.WriteString(w, `{"error":"missing blob"}`)
					return
				}
			}
			creates = append(creates, req)
			_, _ = io.WriteString(w, `{"status":"success"}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	c := api.NewClient(u, srv.Client())
	if err := WaitReady(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	if err := CreateAll(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	if len(creates) != 2 || len(blobs) != 2 {
		t.Fatalf("%d creates, %d blobs", len(creates), len(blobs))
	}
	chat, embed := creates[0], creates[1]
	if chat.Model != ChatName || chat.Template != Template || chat.Stream == nil || *chat.Stream {
		t.Errorf("chat create = %+v", chat)
	}
	if n, ok := chat.Parameters["num_predict"].(float64); !ok || n != DefaultNumPredict {
		t.Errorf("chat parameters = %v", chat.Parameters)
	}
	for _, r := range creates {
		if n, ok := r.Parameters["num_thread"].(float64); !ok || n != 1 {
			t.Errorf("%s parameters = %v", r.Model, r.Parameters)
		}
	}
	if embed.Model != EmbedName || embed.Template != "" {
		t.Errorf("embed create = %+v", embed)
	}
	for _, d := range chat.Files {
		g, err := ggml.Decode(bytes.NewReader(blobs[d]), -1)
		if err != nil {
			t.Fatal(err)
		}
		if g.KV().Architecture() != "llama" {
			t.Errorf("uploaded blob is not the model")
		}
	}
}

func TestF32WriteTo(t *testing.T) {
	var buf bytes.Buffer
	n, err := f32{1, -2.5}.WriteTo(&buf)
	if err != nil || n != 8 {
		t.Fatal(n, err)
	}
	want := binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, math.Float32bits(1)), math.Float32bits(-2.5))
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("% x", buf.Bytes())
	}
}
