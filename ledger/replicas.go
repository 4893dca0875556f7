package ledger

import "path/filepath"

// ReplicaPath is the ledger file of one replica: the replica id before the path's extension
// ("receipts.jsonl" and "a" give "receipts-a.jsonl"), so replicas that share a directory keep
// one chain each. An empty id leaves the path as it is.
func ReplicaPath(path, replica string) string {
	if replica == "" {
		return path
	}
	ext := filepath.Ext(path)
	return path[:len(path)-len(ext)] + "-" + replica + ext
}

// Chains splits the files of several ledgers (one per replica) into their chains, each in
// chain order (see Order), ordered by active file; files set aside by recovery are returned
// apart.
func Chains(files []string) (chains [][]string, setAside []string) {
	ordered, setAside := Order(files)
	last := ""
	for _, f := range ordered {
		base := parseName(f).base
		if len(chains) == 0 || base != last {
			chains = append(chains, nil)
			last = base
		}
		chains[len(chains)-1] = append(chains[len(chains)-1], f)
	}
	return chains, setAside
}

// Active is the active file of one chain's files (the last in chain order, set-aside files
// aside).
func Active(files []string) string {
	chain, _ := Order(files)
	if len(chain) == 0 {
		return ""
	}
	return chain[len(chain)-1]
}
