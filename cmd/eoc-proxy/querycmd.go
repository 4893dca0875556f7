package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/eoc-proxy/eoc-proxy/config"
	"github.com/eoc-proxy/eoc-proxy/energy"
	"github.com/eoc-proxy/eoc-proxy/proxy"
)

func init() { register("query", runQuery) }

const queryUsage = `usage: eoc-proxy query [-config F] [-model M] [-json] [-key-env NAME] QUESTION
QUESTION "-" reads the question from stdin.`

// stdin is where `query -` reads its question; a variable so a test can give one.
var stdin io.Reader = os.Stdin

// queryResult is what `query` prints: the answer, who gave it and what it cost, with the same
// figures and receipt the HTTP API sends in its X-EOC headers, and the API's error when the
// call failed.
type queryResult struct {
	Stage  string `json:"stage"`
	Model  string `json:"model"`
	Answer string `json:"answer"`
	Status int    `json:"status"`
	energy.View
	JoulesSaved      float64 `json:"joules_saved,omitempty"`
	JoulesSavedGrade string  `json:"joules_saved_grade,omitempty"`
	Receipt          string  `json:"receipt"`
	ReceiptTime      string  `json:"receipt_time"`
	Backend          string  `json:"backend,omitempty"`
	Attempts         int     `json:"attempts,omitempty"`
	RequestID        string  `json:"request_id"`
	// State is X-EOC-Joules-State: "provisional" when the figure above was made before the GPU
	// counter updated; Settled then has the figure it settled to.
	State   string        `json:"state,omitempty"`
	Settled *querySettled `json:"settled,omitempty"`
	Error   *queryError   `json:"error,omitempty"`
}

// querySettled is what GET /v1/eoc/calls/{request_id}?wait=1 said of a provisional call: its
// settled figure and the settlement's receipt (Receipt above stays the client's), or, with
// State still "provisional", why it did not settle.
type querySettled struct {
	State string `json:"state"`
	energy.View
	SettledReceipt string `json:"settled_receipt,omitempty"`
	Unsettled      string `json:"unsettled,omitempty"`
}

// queryError is the HTTP API's error object, as a chat call would have received it.
type queryError struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    string `json:"code,omitempty"`
}

// kind is the error's status, type and code, as "HTTP 503, server_error, no_stage_answered".
func (e *queryError) kind(status int) string {
	k := fmt.Sprintf("HTTP %d, %s", status, e.Type)
	if e.Code != "" {
		k += ", " + e.Code
	}
	return k
}

// runQuery is `eoc-proxy query`: one chat call through the configured cascade, in this process.
// It builds what serve builds (stages, meter, ledger) and hands the call to serve's own HTTP
// handler without a listener, so the walk, the metering, the receipt, the ledger record and the
// error words are serve's; it prints the answer and its figures, and fails with the API's error
// when the call does.
func runQuery(args []string, stdout io.Writer) (err error) {
	fs := flag.NewFlagSet("query", flag.ContinueOnError)
	path := configFlag(fs)
	model := fs.String("model", "", "the model asked; default: the first backend's first model that is not a pattern")
	asJSON := fs.Bool("json", false, "print one JSON object")
	keyEnv := fs.String("key-env", "", "name of the environment variable that holds one of auth.keys (needed when keys are set)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New(queryUsage) //nolint:staticcheck // ST1005: the error is the usage text, which main prints whole
	}
	question := fs.Arg(0)
	cfg, err := loadConfig(*path)
	if err != nil {
		return err
	}
	if question == "-" {
		b, err := io.ReadAll(io.LimitReader(stdin, cfg.Limits.MaxBodyBytes+1))
		if err != nil {
			return fmt.Errorf("reading the question from stdin: %w", err)
		}
		question = strings.TrimRight(string(b), "\r\n")
	}
	if strings.TrimSpace(question) == "" {
		return errors.New("the question is empty")
	}
	var apiKey string
	if *keyEnv != "" {
		if apiKey = os.Getenv(*keyEnv); apiKey == "" {
			return fmt.Errorf("environment variable %s is empty or unset", *keyEnv)
		}
	}
	if *model == "" {
		*model = defaultQueryModel(backendPatterns(cfg))
	}

	// Errors only: the call's own failure is printed as the result, and the access log's warning
	// would say it again.
	log := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, NoColor: true}).Level(zerolog.ErrorLevel).With().Timestamp().Logger()
	a, err := build(cfg, filesFor(*path), log)
	if err != nil {
		return err
	}
	// The ledger's final fsync is in shutdown: a query whose record was not kept fails.
	defer func() { err = errors.Join(err, a.shutdown()) }()

	// Ctrl-C cancels the call as a client that goes away does: it is still settled and recorded.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	body, err := json.Marshal(map[string]any{"model": *model, "messages": []map[string]string{{"role": "user", "content": question}}})
	if err != nil {
		return err
	}
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
	req.RemoteAddr = "127.0.0.1:0"
	req.Header.Set("Content-Type", "application/json")
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	rec := httptest.NewRecorder()
	a.handler.ServeHTTP(rec, req)
	res := queryResultOf(*model, rec.Result())
	if res.State == proxy.StateProvisional && res.RequestID != "" {
		settleQuery(ctx, a.handler, apiKey, &res)
	}

	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else if err := printQuery(stdout, res); err != nil {
		return err
	}
	if res.Error != nil {
		return fmt.Errorf("%s (%s)", res.Error.Message, res.Error.kind(res.Status))
	}
	return nil
}

// backendPatterns lists the model patterns of the configured backends, in order.
func backendPatterns(cfg *config.Config) []string {
	var ps []string
	for _, b := range cfg.Backends {
		ps = append(ps, b.Models...)
	}
	return ps
}

// defaultQueryModel is the first pattern that names one model rather than matching many, else
// "default" (a name any "*" backend routes).
func defaultQueryModel(patterns []string) string {
	for _, p := range patterns {
		if p != "" && !strings.ContainsAny(p, `*?[\`) {
			return p
		}
	}
	return "default"
}

// queryResultOf reads the handler's response: the X-EOC headers and the answer or error body.
func queryResultOf(model string, resp *http.Response) queryResult {
	h := resp.Header
	num := func(k string) float64 {
		v, _ := strconv.ParseFloat(h.Get(k), 64) // absent on a call refused before the walk: 0
		return v
	}
	attempts, _ := strconv.Atoi(h.Get("X-Eoc-Attempts"))
	res := queryResult{
		Stage: h.Get("X-Eoc-Stage"), Model: model, Status: resp.StatusCode,
		View: energy.View{Joules: num("X-Eoc-Joules"), JoulesLow: num("X-Eoc-Joules-Low"), JoulesHigh: num("X-Eoc-Joules-High"),
			Grade: h.Get("X-Eoc-Energy"), Coverage: h.Get("X-Eoc-Coverage"), Method: h.Get("X-Eoc-Energy-Method"),
			Reason: h.Get("X-Eoc-Energy-Reason")},
		JoulesSaved:      num("X-Eoc-Joules-Saved"),
		JoulesSavedGrade: h.Get("X-Eoc-Joules-Saved-Grade"), Receipt: h.Get("X-Eoc-Receipt"),
		ReceiptTime: h.Get("X-Eoc-Receipt-Time"), Backend: h.Get("X-Eoc-Backend"), Attempts: attempts,
		RequestID: h.Get("X-Request-Id"), State: h.Get(proxy.HeaderJoulesState),
	}
	body, _ := io.ReadAll(resp.Body) // a recorder's body: in memory
	if resp.StatusCode == http.StatusOK {
		var c struct {
			Choices []struct {
				Message struct {
					Content *string `json:"content"`
				} `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(body, &c); err == nil && len(c.Choices) > 0 && c.Choices[0].Message.Content != nil {
			res.Answer = *c.Choices[0].Message.Content
		}
		return res
	}
	var e struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	res.Error = &queryError{Message: strings.TrimSpace(string(body)), Type: "server_error"}
	if json.Unmarshal(body, &e) == nil && e.Error.Message != "" {
		res.Error = &queryError{Message: e.Error.Message, Type: e.Error.Type}
		if e.Error.Code != nil {
			res.Error.Code = *e.Error.Code
		}
	}
	return res
}

// settleTries bounds how many ?wait=1 reads settleQuery makes (each waits at most 2 s; the
// proxy gives a settlement at most 5 s).
const settleTries = 4

// settleQuery reads the settled figure of res's provisional call from the calls endpoint of h
// (in process, before shutdown), until it is settled or says why not.
func settleQuery(ctx context.Context, h http.Handler, apiKey string, res *queryResult) {
	for range settleTries {
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/v1/eoc/calls/"+res.RequestID+"?wait=1", nil)
		req.RemoteAddr = "127.0.0.1:0"
		if apiKey != "" {
			req.Header.Set("Authorization", "Bearer "+apiKey)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var v proxy.CallFigure
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &v) != nil {
			res.Settled = &querySettled{State: proxy.StateProvisional, Unsettled: fmt.Sprintf("the calls endpoint answered HTTP %d", rec.Code)}
			return
		}
		res.Settled = &querySettled{State: v.State, View: v.View, SettledReceipt: v.SettledReceipt, Unsettled: v.Unsettled}
		if v.State != proxy.StateProvisional || v.Unsettled != "" || ctx.Err() != nil {
			return
		}
	}
	res.Settled.Unsettled = "still settling when the query stopped reading"
}

// printQuery writes res as labelled lines.
func printQuery(w io.Writer, r queryResult) error {
	out := &printer{w: w}
	stage := r.Stage
	if stage == "" {
		stage = "(none)"
	}
	out.printf("stage   : %s\n", stage)
	if r.Error != nil {
		out.printf("error   : %s (%s)\n", r.Error.Message, r.Error.kind(r.Status))
	} else {
		out.printf("answer  : %s\n", r.Answer)
	}
	if r.Grade != "" {
		out.printf("joules  : %s J %s, coverage %s (%s ≤ J ≤ %s)\n", queryJ(r.Joules), r.Grade, r.Coverage, queryJ(r.JoulesLow), queryJ(r.JoulesHigh))
		out.printf("method  : %s", r.Method)
		if r.Reason != "" {
			out.printf(" (%s)", r.Reason)
		}
		out.printf("\n")
		if r.State != "" {
			out.printf("state   : %s\n", r.State)
		}
	}
	if st := r.Settled; st != nil {
		if st.State == proxy.StateSettled {
			out.printf("settled : %s J %s, coverage %s (%s ≤ J ≤ %s)\n", queryJ(st.Joules), st.Grade, st.Coverage, queryJ(st.JoulesLow), queryJ(st.JoulesHigh))
		} else {
			out.printf("settled : no, the provisional figure stands (%s)\n", st.Unsettled)
		}
	}
	if r.JoulesSaved > 0 {
		out.printf("saved   : %s J %s\n", queryJ(r.JoulesSaved), r.JoulesSavedGrade)
	}
	if r.Backend != "" {
		out.printf("backend : %s (%d attempt(s))\n", r.Backend, r.Attempts)
	}
	if r.Receipt != "" {
		out.printf("receipt : %s\n", r.Receipt)
		out.printf("time    : %s\n", r.ReceiptTime)
	}
	if r.Settled != nil && r.Settled.SettledReceipt != "" {
		out.printf("settled receipt : %s\n", r.Settled.SettledReceipt)
	}
	return out.err
}

func queryJ(j float64) string { return strconv.FormatFloat(j, 'f', -1, 64) }
