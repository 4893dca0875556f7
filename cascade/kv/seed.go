package kv

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/eoc-proxy/eoc-proxy/cascade"
	"github.com/eoc-proxy/eoc-proxy/energy"
)

// seed is an operator's answer to one question.
type seed struct {
	question string
	answer   string
	joules   float64
	fromFile bool // joules came from the seed file, not the stage's default
}

// Estimator is this proxy's running cost of a model's calls (energy.Tracker is one): what writing
// an answer of completionTokens tokens would have cost, and a reason word that labels the figure;
// ok is false while it has no figure for the model.
type Estimator interface {
	Estimate(model string, completionTokens int) (joules float64, reason string, ok bool)
}

// seedAnswer is sd's answer to req, with what it saved: the seed file's figure, else the running
// figure for the model asked, else the stated default, labelled with the reason (a saving is
// never measured).
func (s *Stage) seedAnswer(req *cascade.Request, sd seed) *cascade.Answer {
	ans := cascade.TextAnswer(req, sd.answer, 0, sd.joules)
	ans.Energy.Reason = energy.SavedStated
	if !sd.fromFile && s.est != nil {
		if j, reason, ok := s.est.Estimate(req.Chat.Model, ans.Usage.CompletionTokens); ok && j > 0 {
			ans.Energy.Saved, ans.Energy.Reason = j, reason
		}
	}
	return ans
}

// seedRecord is one question/answer pair as a seed file writes it. Joules, optional, is what the
// answer is worth when served (default: the stage's seed estimate).
type seedRecord struct {
	Question string  `json:"question" yaml:"question"`
	Answer   string  `json:"answer" yaml:"answer"`
	Joules   float64 `json:"joules,omitempty" yaml:"joules,omitempty"`
}

// loadSeeds reads seed files into a map from the Normalize form of each question. A file ending
// in .yaml or .yml holds a YAML list of {question, answer}; any other file is JSON Lines, one
// {"question","answer"} object a line (blank lines and lines starting with # are skipped).
// Files are read from fsys (the operating system when nil). Two seeds whose
// questions normalise alike but whose answers differ are an error.
func loadSeeds(fsys fs.FS, files []string, defaultJoules float64) (map[string]seed, error) {
	seeds := map[string]seed{}
	for _, name := range files {
		recs, err := readSeedFile(fsys, name)
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			norm := Normalize(r.rec.Question)
			if norm == "" || strings.TrimSpace(r.rec.Answer) == "" {
				return nil, fmt.Errorf("%s:%d: question and answer are required", name, r.line)
			}
			if old, dup := seeds[norm]; dup && old.answer != r.rec.Answer {
				return nil, fmt.Errorf("%s:%d: %q has two answers (the other is for %q)", name, r.line, r.rec.Question, old.question)
			}
			sd := seed{question: r.rec.Question, answer: r.rec.Answer, joules: r.rec.Joules, fromFile: r.rec.Joules > 0}
			if !sd.fromFile {
				sd.joules = defaultJoules
			}
			seeds[norm] = sd
		}
	}
	return seeds, nil
}

type lineRecord struct {
	line int
	rec  seedRecord
}

func readSeedFile(fsys fs.FS, name string) ([]lineRecord, error) {
	f, err := open(fsys, name)
	if err != nil {
		return nil, fmt.Errorf("kv seed file: %w", err)
	}
	defer func() { _ = f.Close() }()
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml":
		b, err := io.ReadAll(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		var recs []seedRecord
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&recs); err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out := make([]lineRecord, len(recs))
		for i, r := range recs {
			out[i] = lineRecord{line: i + 1, rec: r}
		}
		return out, nil
	}
	var out []lineRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 || b[0] == '#' {
			continue
		}
		var r seedRecord
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, line, err)
		}
		out = append(out, lineRecord{line: line, rec: r})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}
