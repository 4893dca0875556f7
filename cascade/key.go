package cascade

// fieldsNotInKey are request fields that do not change the answer.
var fieldsNotInKey = map[string]bool{
	"stream":         true,
	"stream_options": true,
	"user":           true,
	"metadata":       true,
	"store":          true,
}

// Key is the hex SHA-256 of canonical JSON (sorted keys, normalised numbers) over the tenant and
// every request field that can change the answer. Unknown fields count: an unknown field may
// change the answer, so two requests that differ in one never share a key. The canonical form is
// exactly json.Marshal of the body decoded into map[string]any with UseNumber, minus
// fieldsNotInKey, with numbers normalised (see key_canon.go, which computes it without decoding);
// a body that is malformed or not an object is hashed as received.
func (r *Request) Key() string {
	if r.key == "" {
		r.key = canonicalKey(r.Tenant, r.Raw)
	}
	return r.key
}
