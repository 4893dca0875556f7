package kv

import "testing"

// FuzzNormalize: normalising is idempotent, and a text never conflicts with itself or with its
// own normal form's case variants.
func FuzzNormalize(f *testing.F) {
	for _, s := range []string{"What's 3.5 + -4?", "I can't, won't, I'm, John's, dont", "'s n't'", "ＷＨＡＴ is 2FA", "Don't disable C#!", "", "1,000:30", "'-'"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := Normalize(s)
		if Normalize(n) != n {
			t.Errorf("Normalize(%q) = %q, but Normalize of that is %q", s, n, Normalize(n))
		}
		if conflict(sign(s), sign(s)) {
			t.Errorf("%q conflicts with itself", s)
		}
	})
}
