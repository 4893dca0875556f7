package cascade

import "testing"

// keyGolden are keys computed by earlier implementations: the cache, the kv store and receipts
// hold them, so a change of format shows here first.
var keyGolden = []struct{ tenant, body, key string }{
	{"", `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"say hello"}],"max_tokens":16}`, "ad8d91f215209287085f7eceffacc1c464f86a357b6185a9269b7248752e0175"},
	{"team-a", `{ "messages" : [ {"content":"be brief","role":"system"} , {"role":"user","content":"say hello"} ] , "max_tokens" : 16.0 , "model" : "m", "stream": true, "user": "u" }`, "d8ee1098e730dce22d99b2972301336ff2c9f2c822c4ab71a4fda11fde08533a"},
	{"", `{"model":"m","messages":[{"role":"user","content":"caf\u00e9 <b>&</b> \ud83d\ude00 \u2028"}],"temperature":1.0,"top_p":0.30000000000000004,"seed":1e3}`, "b2a42ef7912919d06fcf5c2ae3f8d7a05b31c777cd13dc555f9b0b5d0e80a9d0"},
	{"", `{"n":[0,-0,1e18,-1e18,9223372036854775808,1e309,4.9e-324],"a":1,"a":2,"st\u0072eam":1}`, "d6eba1b5ce1616a29ff87adfb96c04198183e362ce8805dd0c8d814386ad2909"},
	{"", `not json`, "adbea6597c114b464b6f3f3d92a76adfd30c69156352f81c8d6c7da059d90c7a"},
	{"", `[{"model":"m"}]`, "379ffdd87676b9c4b0d5ad1dce59d7e70dd5e35aea66241de6bdc770772c7ec0"},
	{"", `null`, "0676a7a3eb29f93af477e318288e65979e83b0efec4c9fe1ab938073ee637137"},
}

func TestKeyValuesAreStable(t *testing.T) {
	for _, g := range keyGolden {
		if got := canonicalKey(g.tenant, []byte(g.body)); got != g.key {
			t.Errorf("key(%q, %s) = %s, want %s", g.tenant, g.body, got, g.key)
		}
	}
}
