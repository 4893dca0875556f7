package proxy

import (
	"embed"
	"io/fs"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
)

// uiFiles are the page's static files: plain HTML, CSS and a small script that draws SVG, served
// as they are (no build step, nothing fetched from elsewhere).
//
//go:embed ui
var uiFiles embed.FS

// uiRoutes serves GET /ui (the page), /ui/static/* (its files) and /ui/data (the figures it
// polls). With keys configured, all three need an admin key (adminOnly).
func (s *Server) uiRoutes(r chi.Router) {
	r.Get("/ui", s.adminOnly(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		http.ServeFileFS(w, r, uiFiles, "ui/index.html")
	}))
	r.Get("/ui/static/*", s.adminOnly(func(w http.ResponseWriter, r *http.Request) {
		name := "ui/" + chi.URLParam(r, "*")
		if !fs.ValidPath(name) || name == "ui/index.html" {
			http.NotFound(w, r)
			return
		}
		http.ServeFileFS(w, r, uiFiles, name)
	}))
	r.Get("/ui/data", s.adminOnly(s.uiData))
}

func (s *Server) uiData(w http.ResponseWriter, _ *http.Request) {
	d := s.ui.snapshot(time.Now())
	d.Auth = s.keys != nil
	if s.opts.Counters != nil {
		d.Counters = s.opts.Counters()
	}
	for _, k := range s.opts.Keys {
		if k.Budget == nil {
			continue
		}
		left, _ := s.budgets.remaining(k.ID)
		d.Budgets = append(d.Budgets, UIKey{ID: k.ID, Budget: k.Budget.Joules, Per: k.Budget.Per, Left: left.joules, Coverage: left.coverage()})
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, d)
}

// adminOnly lets a request through when auth is off, or when it carries an admin key
// (Options.AdminKeyIDs). The key comes as `Authorization: Bearer KEY`, or as the password of
// HTTP Basic auth, so a browser can open the page: the 401 asks for it. A missing or unknown key
// gets 401; a valid key that is not an admin's gets 403, since asking again with it cannot help.
func (s *Server) adminOnly(next http.HandlerFunc) http.HandlerFunc {
	if s.keys == nil {
		return next
	}
	return func(w http.ResponseWriter, r *http.Request) {
		token := presentedKey(r)
		if token == "" {
			w.Header().Set("WWW-Authenticate", `Basic realm="eoc-proxy admin", charset="UTF-8"`)
			writeError(w, &APIError{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "missing_api_key",
				Message: "The page needs an admin key: send it as 'Authorization: Bearer KEY' or as the Basic auth password."})
			return
		}
		id, ok := s.keys.lookup(token)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Basic realm="eoc-proxy admin", charset="UTF-8"`)
			writeError(w, &APIError{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "invalid_api_key",
				Message: "Incorrect API key provided."})
			return
		}
		if !slices.Contains(s.opts.AdminKeyIDs, id) {
			writeError(w, &APIError{Status: http.StatusForbidden, Type: "invalid_request_error", Code: "not_admin",
				Message: "This key is not an admin key (auth.admin_keys)."})
			return
		}
		fields(r.Context()).tenant = id
		next(w, r)
	}
}

// presentedKey is the key of a Bearer or Basic Authorization header ("" when none).
func presentedKey(r *http.Request) string {
	if _, pass, ok := r.BasicAuth(); ok {
		return pass
	}
	scheme, token, found := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}
