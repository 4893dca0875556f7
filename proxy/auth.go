package proxy

import (
	"crypto/sha256"
	"net/http"
	"strings"
)

// APIKey is one of the proxy's own keys. Its ID names the tenant that isolates cache and kv
// entries and carries the budget; the key itself is never logged.
type APIKey struct {
	ID     string
	Key    string
	Budget *Budget
	Limits *Rate // calls and completion tokens per minute (limits.go)
}

type keyring struct {
	byHash map[[32]byte]string // sha256(key) → id
}

func newKeyring(keys []APIKey) *keyring {
	if len(keys) == 0 {
		return nil
	}
	k := &keyring{byHash: make(map[[32]byte]string, len(keys))}
	for _, key := range keys {
		k.byHash[sha256.Sum256([]byte(key.Key))] = key.ID
	}
	return k
}

// lookup returns the id of the presented key. Keys are compared by their SHA-256, so the time a
// lookup takes says nothing about how much of a guess matched.
func (k *keyring) lookup(presented string) (string, bool) {
	id, ok := k.byHash[sha256.Sum256([]byte(presented))]
	return id, ok
}

// authenticate requires a key when keys are configured, as `Authorization: Bearer <key>` or
// as Anthropic's `x-api-key: <key>`, and puts the key's id on the request as its tenant. A
// refusal is in the shape of the request's route.
func (s *Server) authenticate(next http.Handler) http.Handler {
	if s.keys == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := apiKeyOf(r.Header)
		if !ok {
			s.writeRouteError(w, r, &APIError{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "missing_api_key",
				Message: "You didn't provide an API key. Send it as 'Authorization: Bearer YOUR_KEY'."})
			return
		}
		id, ok := s.keys.lookup(token)
		if !ok {
			s.writeRouteError(w, r, &APIError{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: "invalid_api_key",
				Message: "Incorrect API key provided."})
			return
		}
		fields(r.Context()).tenant = id
		next.ServeHTTP(w, r)
	})
}

// apiKeyOf is the key a request presents: Authorization's bearer token when the request
// sends Authorization, else x-api-key's value.
func apiKeyOf(h http.Header) (string, bool) {
	if auth := h.Get("Authorization"); auth != "" {
		scheme, token, found := strings.Cut(strings.TrimSpace(auth), " ")
		token = strings.TrimSpace(token)
		// The scheme is case-insensitive (RFC 9110).
		return token, found && strings.EqualFold(scheme, "Bearer") && token != ""
	}
	token := strings.TrimSpace(h.Get("X-Api-Key"))
	return token, token != ""
}
