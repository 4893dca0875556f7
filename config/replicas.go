package config

import (
	"fmt"
	"net/url"
	"regexp"
)

// replicaIDs are what a replica id may be: it goes into ledger file names.
var replicaIDs = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// validateReplicas checks the redis section, replica_id and the keys' rate limits.
func (c *Config) validateReplicas(p *problems) {
	if c.Redis.URL != "" {
		u, err := url.Parse(string(c.Redis.URL))
		switch {
		case err != nil:
			p.add("redis.url", "does not parse as a URL") // the URL may hold a password: not echoed
		case u.Scheme != "redis" && u.Scheme != "rediss":
			p.add("redis.url", "scheme %q, want redis:// or rediss://", u.Scheme)
		case u.Host == "":
			p.add("redis.url", "no host")
		}
	}
	if c.Redis.OpTimeout < 0 {
		p.add("redis.op_timeout", "must not be negative")
	}
	if c.ReplicaID != "" && !replicaIDs.MatchString(c.ReplicaID) {
		p.add("replica_id", "%q: letters, digits, '.', '_' and '-' only, at most 63", c.ReplicaID)
	}
	for i, k := range c.Auth.Keys {
		if k.Limits == nil {
			continue
		}
		f := fmt.Sprintf("auth.keys[%d].limits", i)
		if k.Limits.RPM < 0 {
			p.add(f+".rpm", "must not be negative")
		}
		if k.Limits.TPM < 0 {
			p.add(f+".tpm", "must not be negative")
		}
	}
}
